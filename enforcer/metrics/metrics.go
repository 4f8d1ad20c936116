package metrics

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Session results (klock_sessions_total's result label).
const (
	ResultClean       = "clean"       // CLEAN or AMENDED: nothing outside the scope went unamended
	ResultViolation   = "violation"   // a violation that did not kill (permissive, blocked)
	ResultRefused     = "refused"     // refused to start, or a wall refused a declared operation
	ResultKilled      = "killed"      // klock killed it (strict violation, lost events)
	ResultInterrupted = "interrupted" // ended from outside (kill, client gone, shutdown)
	ResultFailed      = "failed"      // klock failed to run or finish it
)

// Metrics are klockd's metrics. Its methods are safe for concurrent use;
// a nil *Metrics records nothing.
type Metrics struct {
	reg        *prometheus.Registry
	active     prometheus.Gauge
	sessions   *prometheus.CounterVec
	start      prometheus.Histogram
	violations *prometheus.CounterVec
	lost       *prometheus.CounterVec
	kill       prometheus.Histogram
	rollback   *prometheus.CounterVec
	leases     *prometheus.CounterVec
	leaseWait  prometheus.Histogram
}

// New makes the metrics and their registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "klock_sessions_active",
		Help: "Sessions klockd is running now (admitted, not yet ended)."})
	m.sessions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "klock_sessions_total",
		Help: "Sessions klockd ran, by mode and result (clean, violation, refused, killed, interrupted, failed)."},
		[]string{"mode", "result"})
	m.start = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "klock_session_start_seconds",
		Help:    "Time from a run request received to its agent running.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	m.violations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "klock_violations_total",
		Help: "Scope violations in sessions' verification logs."},
		[]string{"predicate", "object_type", "action"})
	m.lost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "klock_kernel_events_lost_total",
		Help: "Kernel events sessions' backends could not deliver."}, []string{"backend"})
	m.kill = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "klock_kill_seconds",
		Help:    "Time from a session's first violation to klock's kill of it.",
		Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}})
	m.rollback = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "klock_rollback_files_total",
		Help: "Files sessions' rollbacks handled, by outcome (restored, removed, recreated, spared, left, failed)."},
		[]string{"outcome"})
	m.leases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "klock_leases_total",
		Help: "KLIS leases: granted (leases sessions held), denied (sessions refused for a conflicting lease)."},
		[]string{"outcome"})
	m.leaseWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "klock_lease_wait_seconds",
		Help:    "How long sessions that had to wait for their leases (klock run --wait) waited.",
		Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 300, 600, 1800}})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.active, m.sessions, m.start, m.violations, m.lost, m.kill, m.rollback, m.leases, m.leaseWait)
	return m
}

// Registry is the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry (the /metrics endpoint).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SessionAdmitted counts a session klockd is about to run as active.
func (m *Metrics) SessionAdmitted() {
	if m != nil {
		m.active.Inc()
	}
}

// SessionRunning records how long the session took from its request
// received to its agent running.
func (m *Metrics) SessionRunning(sinceRequest time.Duration) {
	if m != nil {
		m.start.Observe(sinceRequest.Seconds())
	}
}

// SessionEnded records an admitted session's end: res and err are what
// session.Run returned.
func (m *Metrics) SessionEnded(mode policy.Mode, res *session.Result, err error) {
	if m == nil {
		return
	}
	m.active.Dec()
	m.sessions.WithLabelValues(modeLabel(mode), Result(res, err)).Inc()
	if lc := (*session.LeaseConflictError)(nil); errors.As(err, &lc) {
		m.leases.WithLabelValues("denied").Inc()
	}
	if res != nil && res.Log != nil {
		m.observeLog(res.Log)
	}
}

// Result is a session's result label from what session.Run returned.
func Result(res *session.Result, err error) string {
	switch {
	case res == nil:
		var lc *session.LeaseConflictError
		if errors.Is(err, session.ErrDegraded) || errors.As(err, &lc) {
			return ResultRefused
		}
		return ResultFailed
	case res.Interrupted:
		return ResultInterrupted
	case res.Killed:
		return ResultKilled
	case err != nil || res.Log == nil:
		return ResultFailed
	}
	switch res.Log.Verdict {
	case vlog.VerdictClean, vlog.VerdictAmended:
		return ResultClean
	case vlog.VerdictRefused:
		return ResultRefused
	case vlog.VerdictKilled:
		return ResultKilled
	}
	return ResultViolation
}

// observeLog counts a finished session's violations, lost events, kill
// latency, leases and rollback.
func (m *Metrics) observeLog(l *vlog.Log) {
	var first time.Time
	for _, v := range l.Violations {
		p, t := tripleLabels(v.Triple)
		m.violations.WithLabelValues(p, t, oneOf(v.Action, "violation-kill", "violation-blocked", "amended", vlog.ActionLeaseDenied)).Inc()
		if first.IsZero() || v.Time.Before(first) {
			first = v.Time
		}
	}
	if l.Lost.Total > 0 {
		m.lost.WithLabelValues("observe").Add(float64(l.Lost.Total))
	}
	if k := l.Exit.KilledAt; !k.IsZero() && !first.IsZero() && !k.Before(first) {
		m.kill.Observe(k.Sub(first).Seconds())
	}
	if n := len(l.Leases); n > 0 {
		m.leases.WithLabelValues("granted").Add(float64(n))
	}
	if w := l.LeaseWait; w != nil {
		m.leaseWait.Observe(float64(w.WaitedMS) / 1000)
	}
	for _, op := range l.Rollback {
		outcome := "failed"
		if op.OK {
			outcome = oneOf(op.Action, vlog.RollbackRestored, vlog.RollbackRemoved, vlog.RollbackRecreated, vlog.RollbackSpared, vlog.RollbackLeft)
		}
		m.rollback.WithLabelValues(outcome).Inc()
	}
}

// tripleLabels are a violation triple's ("MUTATES FILE:/p") predicate and
// object type, "other" for anything outside KLIS's fixed sets.
func tripleLabels(triple string) (pred, typ string) {
	p, obj, _ := strings.Cut(triple, " ")
	t, _, _ := strings.Cut(obj, ":")
	preds := make([]string, 0, 6)
	for _, q := range policy.Predicates() {
		preds = append(preds, q.String())
	}
	return oneOf(p, preds...), oneOf(t, "FILE", "NET", "PROC")
}

func modeLabel(m policy.Mode) string {
	return oneOf(string(m), string(policy.ModeStrict), string(policy.ModePermissive))
}

// oneOf is v when it is one of allowed, else "other": a label's values
// stay a fixed set whatever a log holds.
func oneOf(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return "other"
}
