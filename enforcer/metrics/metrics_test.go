package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A non-loopback address without TLS is refused with the typed error,
// which says what to do; loopback listens.
func TestListenRefusesInsecure(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9100", "example.com:9100"} {
		_, err := Listen(ListenOptions{Addr: addr})
		var ie *InsecureListenError
		if !errors.As(err, &ie) || ie.Addr != addr || !strings.Contains(err.Error(), "--metrics-tls-cert") {
			t.Errorf("Listen(%s): %v", addr, err)
		}
	}
	if _, err := Listen(ListenOptions{Addr: "127.0.0.1:0", CertFile: "c"}); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	ln, err := Listen(ListenOptions{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

// Labels stay bounded whatever a log holds: paths and unknown words
// become "other", never a label value.
func TestLabelsAreBounded(t *testing.T) {
	m := New()
	m.SessionAdmitted("made-up kind")
	killedAt := time.Unix(100, 0)
	m.SessionEnded("made-up kind", "strict", &session.Result{Killed: true, Rollback: &session.RollbackStats{Bytes: 42, Duration: time.Millisecond}, Log: &vlog.Log{
		Violations: []vlog.Violation{
			{Time: killedAt.Add(-time.Millisecond), Triple: "MUTATES FILE:/secret/path", Action: "violation-kill"},
			{Time: killedAt, Triple: "/weird SYMBOL:x", Action: "made-up"},
		},
		Rollback: []vlog.RollbackOp{{Path: "/a", Action: "restored", OK: true}, {Path: "/b", Action: "removed"}},
		Lost:     vlog.Lost{Total: 3},
		Events:   7,
		Backends: []vlog.Backend{{Name: "landlock"}, {Name: "tracepoints"}},
		Exit:     vlog.Exit{KilledAt: killedAt},
	}}, nil)
	for name, want := range map[string]float64{
		`klock_sessions_total{kind="other",mode="strict",result="killed"}`:                       1,
		`klock_violations_total{predicate="MUTATES",object_type="FILE",action="violation-kill"}`: 1,
		`klock_violations_total{predicate="other",object_type="other",action="other"}`:           1,
		`klock_rollback_files_total{outcome="restored"}`:                                         1,
		`klock_rollback_files_total{outcome="failed"}`:                                           1,
		`klock_kernel_events_lost_total{backend="tracepoints"}`:                                  3,
		`klock_kernel_events_total{backend="tracepoints"}`:                                       7,
		`klock_rollback_bytes_total`:                                                             42,
	} {
		fam, labels, _ := strings.Cut(name, "{")
		got := value(t, m, fam, strings.TrimSuffix(labels, "}"))
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	m.SessionAdmitted(KindRun)
	m.SessionEnded(KindRun, "strict", nil, fmt.Errorf("x: %w", &session.LeaseConflictError{}))
	if n := value(t, m, "klock_lease_denied_sessions_total", ""); n != 1 {
		t.Errorf("sessions denied %v", n)
	}
	if n := value(t, m, "klock_sessions_total", `kind="run",mode="strict",result="refused"`); n != 1 {
		t.Errorf("refused run sessions %v", n)
	}
	for _, kind := range []string{"run", "other"} {
		if n := value(t, m, "klock_sessions_active", `kind="`+kind+`"`); n != 0 {
			t.Errorf("active %s %v", kind, n)
		}
	}
	if n := testutil.CollectAndCount(m.sess.kill); n != 1 {
		t.Errorf("kill histogram series %d", n)
	}
	if n := testutil.CollectAndCount(m.sess.rollbackTime); n != 1 {
		t.Errorf("rollback histogram series %d", n)
	}
}

// value is one series' value, read through the registry.
func value(t *testing.T, m *Metrics, fam, labels string) float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != fam {
			continue
		}
		for _, s := range f.GetMetric() {
			var parts []string
			for _, l := range s.GetLabel() {
				parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if got := strings.Join(parts, ","); sameLabels(got, labels) {
				return s.GetCounter().GetValue() + s.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// sameLabels compares two label lists in any order.
func sameLabels(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	set := map[string]bool{}
	for _, p := range strings.Split(a, ",") {
		set[p] = true
	}
	bs := strings.Split(b, ",")
	if len(bs) != len(set) {
		return false
	}
	for _, p := range bs {
		if !set[p] {
			return false
		}
	}
	return true
}

// Result reads the session's outcome: its flags first, then its verdict.
func TestResult(t *testing.T) {
	log := func(verdict string) *vlog.Log { return &vlog.Log{Verdict: verdict} }
	for want, c := range map[string]struct {
		res *session.Result
		err error
	}{
		ResultClean:       {&session.Result{Log: log(vlog.VerdictAmended)}, nil},
		ResultViolation:   {&session.Result{Log: log(vlog.VerdictViolation)}, nil},
		ResultRefused:     {nil, fmt.Errorf("x: %w", session.ErrDegraded)},
		ResultKilled:      {&session.Result{Killed: true, Log: log(vlog.VerdictViolation)}, nil},
		ResultInterrupted: {&session.Result{Interrupted: true, Killed: true}, nil},
		ResultFailed:      {nil, errors.New("launch failed")},
	} {
		if got := Result(c.res, c.err); got != want {
			t.Errorf("Result(%+v, %v) = %s, want %s", c.res, c.err, got, want)
		}
	}
}

// series is value for `name{labels}`.
func series(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	fam, labels, _ := strings.Cut(name, "{")
	return value(t, m, fam, strings.TrimSuffix(labels, "}"))
}
