package metrics

import (
	"errors"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/prometheus/client_golang/prometheus"
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

// Session kinds (the kind label): klockd's daemon.KindRun and
// daemon.KindContainer.
const (
	KindRun       = "run"
	KindContainer = "container"
)

// Event backends (the backend label of the kernel event metrics): the
// mechanism that reported a session's file, exec and process events.
const (
	BackendLSM         = "bpf-lsm"
	BackendTracepoints = "tracepoints"
)

// sessionMetrics are the metrics read from klockd's sessions.
type sessionMetrics struct {
	active         *prometheus.GaugeVec
	sessions       *prometheus.CounterVec
	start          *prometheus.HistogramVec
	violations     *prometheus.CounterVec
	events, lost   *prometheus.CounterVec
	kill           prometheus.Histogram
	rollbackFiles  *prometheus.CounterVec
	rollbackBytes  prometheus.Counter
	rollbackTime   prometheus.Histogram
	leaseWait      prometheus.Histogram
	sessionsDenied prometheus.Counter
}

func newSessionMetrics(register func(...prometheus.Collector)) sessionMetrics {
	s := sessionMetrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "klock_sessions_active",
			Help: "Sessions klockd is running now (admitted, not yet ended), by kind (run, container)."}, []string{"kind"}),
		sessions: prometheus.NewCounterVec(counter("klock_sessions_total",
			"Sessions klockd ran, by kind (run, container), mode and result (clean, violation, refused, killed, interrupted, failed)."),
			[]string{"kind", "mode", "result"}),
		start: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "klock_session_start_seconds",
			Help:    "Time from a run or adopt request received to its agent running.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"kind"}),
		violations: prometheus.NewCounterVec(counter("klock_violations_total",
			"Scope violations in sessions' verification logs."), []string{"predicate", "object_type", "action"}),
		events: prometheus.NewCounterVec(counter("klock_kernel_events_total",
			"Kernel events sessions' backends delivered (the logs' events), by the session's event backend."), []string{"backend"}),
		lost: prometheus.NewCounterVec(counter("klock_kernel_events_lost_total",
			"Kernel events sessions' backends could not deliver (ring buffer full, per-session map), by the session's event backend."), []string{"backend"}),
		kill: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "klock_kill_seconds",
			Help:    "Time from a session's first violation to klock's kill of it.",
			Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
		rollbackFiles: prometheus.NewCounterVec(counter("klock_rollback_files_total",
			"Files sessions' rollbacks handled, by outcome (restored, removed, recreated, spared, left, failed)."), []string{"outcome"}),
		rollbackBytes: prometheus.NewCounter(counter("klock_rollback_bytes_total",
			"Bytes of the regular files sessions' rollbacks put back (their sizes after the rollback).")),
		rollbackTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "klock_rollback_seconds",
			Help:    "How long killed sessions' rollbacks took.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 60, 300}}),
		leaseWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "klock_lease_wait_seconds",
			Help:    "How long sessions that had to wait for their leases (klock run --wait) waited.",
			Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 300, 600, 1800}}),
		sessionsDenied: prometheus.NewCounter(counter("klock_lease_denied_sessions_total",
			"Sessions refused because another holder kept a conflicting lease (klock run exit 75).")),
	}
	register(s.active, s.sessions, s.start, s.violations, s.events, s.lost, s.kill,
		s.rollbackFiles, s.rollbackBytes, s.rollbackTime, s.leaseWait, s.sessionsDenied)
	// Every series of the small label sets exists from the start, at 0:
	// a rate over a series that appears only with its first increment
	// misses that increment.
	for _, k := range []string{KindRun, KindContainer} {
		s.active.WithLabelValues(k)
		s.start.WithLabelValues(k)
		for _, mode := range []policy.Mode{policy.ModeStrict, policy.ModePermissive} {
			for _, r := range []string{ResultClean, ResultViolation, ResultRefused, ResultKilled, ResultInterrupted, ResultFailed} {
				s.sessions.WithLabelValues(k, string(mode), r)
			}
		}
	}
	for _, be := range []string{BackendLSM, BackendTracepoints} {
		s.events.WithLabelValues(be)
		s.lost.WithLabelValues(be)
	}
	for _, o := range []string{vlog.RollbackRestored, vlog.RollbackRemoved, vlog.RollbackRecreated, vlog.RollbackSpared, vlog.RollbackLeft, "failed"} {
		s.rollbackFiles.WithLabelValues(o)
	}
	return s
}

// SessionAdmitted counts a session klockd is about to run as active.
func (m *Metrics) SessionAdmitted(kind string) {
	if m != nil {
		m.sess.active.WithLabelValues(kindLabel(kind)).Inc()
	}
}

// SessionRunning records how long the session took from its request
// received to its agent running.
func (m *Metrics) SessionRunning(kind string, sinceRequest time.Duration) {
	if m != nil {
		m.sess.start.WithLabelValues(kindLabel(kind)).Observe(sinceRequest.Seconds())
	}
}

// SessionEnded records an admitted session's end: res and err are what
// session.Run returned.
func (m *Metrics) SessionEnded(kind string, mode policy.Mode, res *session.Result, err error) {
	if m == nil {
		return
	}
	s := &m.sess
	s.active.WithLabelValues(kindLabel(kind)).Dec()
	s.sessions.WithLabelValues(kindLabel(kind), modeLabel(mode), Result(res, err)).Inc()
	if lc := (*session.LeaseConflictError)(nil); errors.As(err, &lc) {
		s.sessionsDenied.Inc()
	}
	if res == nil {
		return
	}
	if r := res.Rollback; r != nil {
		s.rollbackBytes.Add(float64(r.Bytes))
		s.rollbackTime.Observe(r.Duration.Seconds())
	}
	if res.Log != nil {
		s.observeLog(res.Log)
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

// observeLog counts a finished session's violations, events, kill
// latency, lease wait and rollback.
func (s *sessionMetrics) observeLog(l *vlog.Log) {
	var first time.Time
	for _, v := range l.Violations {
		p, t := tripleLabels(v.Triple)
		s.violations.WithLabelValues(p, t, oneOf(v.Action, "violation-kill", "violation-blocked", "amended", vlog.ActionLeaseDenied)).Inc()
		if first.IsZero() || v.Time.Before(first) {
			first = v.Time
		}
	}
	be := EventBackend(l)
	s.events.WithLabelValues(be).Add(float64(l.Events))
	s.lost.WithLabelValues(be).Add(float64(l.Lost.Total))
	if k := l.Exit.KilledAt; !k.IsZero() && !first.IsZero() && !k.Before(first) {
		s.kill.Observe(k.Sub(first).Seconds())
	}
	if w := l.LeaseWait; w != nil {
		s.leaseWait.Observe(float64(w.WaitedMS) / 1000)
	}
	for _, op := range l.Rollback {
		outcome := "failed"
		if op.OK {
			outcome = oneOf(op.Action, vlog.RollbackRestored, vlog.RollbackRemoved, vlog.RollbackRecreated, vlog.RollbackSpared, vlog.RollbackLeft)
		}
		s.rollbackFiles.WithLabelValues(outcome).Inc()
	}
}

// EventBackend is the backend label of a session's kernel events and
// losses: bpf-lsm when its log lists bpf-lsm (its hooks report the file,
// exec and socket operations), else tracepoints when it lists them (the
// Landlock path: the raw syscall tracepoints report), else "other" (no
// event backend: degraded, or hook-only containers). The log counts its
// events and losses as one total, the cgroup walls' and DNS proxy's
// included, so those are counted under the session's event backend.
func EventBackend(l *vlog.Log) string {
	be := "other"
	for _, b := range l.Backends {
		switch {
		case b.Name == BackendLSM && b.Guarantee != "unavailable":
			return BackendLSM
		case b.Name == BackendTracepoints && b.Guarantee != "unavailable":
			be = BackendTracepoints
		}
	}
	return be
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

func kindLabel(k string) string { return oneOf(k, KindRun, KindContainer) }
