//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/leaseapi"
	"github.com/klocklabs/klock/enforcer/metrics"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"

	dto "github.com/prometheus/client_model/go"
)

// sessionsRun are the verification logs of the sessions the test ran.
type sessionsRun struct {
	clean, killed, holder, waiter *vlog.Log
}

func (r sessionsRun) all() []*vlog.Log { return []*vlog.Log{r.clean, r.killed, r.holder, r.waiter} }

// TestKlockdMetricsFourSessions: a real klockd (--metrics-listen
// 127.0.0.1:0 --metrics-bpf-stats) runs, through bin/klock run, a clean
// strict session, a strict session killed and rolled back, and a session
// that waits (Wait-Die: dies and retries) for the lease another holds,
// then takes, contends for and revokes a lease through klockd's lease API;
// /metrics, scraped while they run and after, moved by exactly what their
// verification logs say, and promtool check metrics accepts it. The
// fourth row, a guard refusal, is guardRow's.
func TestKlockdMetricsFourSessions(t *testing.T) {
	testutil.RequirePrivileged(t)
	if _, err := exec.LookPath("promtool"); err != nil {
		testutil.Unavailable(t, "promtool (scripts/deps.sh ops installs Debian's prometheus package)")
	}
	sock, addr := startKlockd(t, "--metrics-bpf-stats")
	k := &klockRun{t: t, bin: testutil.BuildCommand(t, testutil.OpenDir(t, -1), "klock"), sock: sock}
	before := scrape(t, addr)
	var r sessionsRun
	r.clean = k.run(k.manifest("clean", k.workdir(), "CONSUMES FILE:${workdir}/**"), 0, "/usr/bin/true")
	killedDir := k.workdir()
	data := filepath.Join(killedDir, "data.txt")
	writeAgentFile(t, data, bytes.Repeat([]byte("a"), 1000))
	r.killed = k.run(k.manifest("killed", killedDir, "CONSUMES FILE:${workdir}/**", "MUTATES FILE:${workdir}/data.txt"), -1,
		"/bin/sh", "-c", "echo changed > "+data+"; echo x > "+killedDir+"/undeclared; sleep 5")
	r.holder, r.waiter = leaseWaitRow(t, k, addr, before)
	leaseAPIRow(t, filepath.Join(filepath.Dir(sock), "api.sock"))
	after := scrapeText(t, addr)
	checkDeltas(t, before, parseMetrics(t, after), r)
	if got, err := os.ReadFile(data); err != nil || len(got) != 1000 {
		t.Errorf("the killed session's rollback left data.txt %d bytes (%v)", len(got), err)
	}
	guardRow(t, k, addr)
	promtool := exec.Command("promtool", "check", "metrics")
	promtool.Stdin = bytes.NewReader(scrapeText(t, addr))
	if out, err := promtool.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// leaseWaitRow runs a session holding MUTATES on a workdir until the
// test lets it end, and a second that wants the same with klock run
// --wait: younger, it dies and retries (KLIS-4 Wait-Die) until the first
// ends. It scrapes while both run.
func leaseWaitRow(t *testing.T, k *klockRun, addr string, before map[string]*dto.MetricFamily) (holder, waiter *vlog.Log) {
	t.Helper()
	wd := k.workdir()
	m := k.manifest("lease", wd, "MUTATES FILE:${workdir}/**")
	hold := k.start(m, nil, "/bin/sh", "-c", "while [ ! -e "+wd+"/go ]; do sleep 0.1; done")
	waitFor(t, addr, "the holder's grant", func(f map[string]*dto.MetricFamily) bool {
		return delta(before, f, "klock_lease_decisions_total", map[string]string{"outcome": "granted"}) == 3 &&
			value(f, "klock_sessions_active", map[string]string{"kind": "run"}) == 1
	})
	wait := k.start(m, []string{"--wait", "5m"}, "/usr/bin/true")
	during := waitFor(t, addr, "the waiter's first death", func(f map[string]*dto.MetricFamily) bool {
		return delta(before, f, "klock_lease_decisions_total", map[string]string{"outcome": "die"}) >= 1
	})
	if n := value(during, "klock_sessions_active", map[string]string{"kind": "run"}); n != 2 {
		t.Errorf("klock_sessions_active while one session waits for the other's lease: %v, want 2", n)
	}
	if n := delta(before, during, "klock_sessions_total", nil); n != 2 {
		t.Errorf("klock_sessions_total while the lease sessions run: moved by %v, want 2 (clean, killed)", n)
	}
	if err := os.WriteFile(filepath.Join(wd, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return hold.wait(0), wait.wait(0)
}

// leaseAPIRow takes a lease through klockd's lease API, has a younger
// client die on it, and revokes it: the API's decisions are counted with
// the sessions' (checkLeaseDeltas), from the store they share.
func leaseAPIRow(t *testing.T, apiSock string) {
	t.Helper()
	ctx, cl := context.Background(), leaseapi.Dial(apiSock)
	defer cl.Close()
	object := "MUTATES FILE:" + testutil.OpenDir(t, -1) + "/**"
	r, err := cl.Acquire(ctx, leaseapi.ManifestRequest{AgentID: "api-older", SessionID: "metrics-api-1", Intents: []string{object},
		Timestamp: time.Now().Add(-time.Minute).UnixMilli()})
	if err != nil || r.Outcome != "GRANTED" {
		t.Fatalf("lease API acquire: %+v %v", r, err)
	}
	r, err = cl.Acquire(ctx, leaseapi.ManifestRequest{AgentID: "api-younger", SessionID: "metrics-api-2", Intents: []string{object}})
	if r == nil || r.Outcome != "DIE" {
		t.Fatalf("lease API acquire of a held lease by a younger client: %+v %v", r, err)
	}
	if n, err := cl.Revoke(ctx, "metrics-api-1"); n != 1 || err != nil {
		t.Fatalf("lease API revoke: %d %v", n, err)
	}
}

// klockRun runs bin/klock run against the test's klockd.
type klockRun struct {
	t         *testing.T
	bin, sock string
}

// workdir is a directory the agent owns.
func (k *klockRun) workdir() string { return testutil.OpenDir(k.t, metricsAgentUID) }

// manifest writes a strict manifest over wd with intents (and running
// /usr/bin and /bin) and returns its path.
func (k *klockRun) manifest(agent, wd string, intents ...string) string {
	p := filepath.Join(testutil.OpenDir(k.t, -1), agent+".yaml")
	y := testutil.ManifestYAML("metrics-"+agent, "strict", wd, append(intents, "PROVIDES PROC:/usr/bin/**", "PROVIDES PROC:/bin/**")...)
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		k.t.Fatal(err)
	}
	return p
}

// started is a klock run under way.
type started struct {
	k      *klockRun
	cmd    *exec.Cmd
	out    *testutil.SyncBuffer
	logDir string
}

// start starts klock run -m manifest [flags] -- argv.
func (k *klockRun) start(manifest string, flags []string, argv ...string) *started {
	s := &started{k: k, out: &testutil.SyncBuffer{}, logDir: testutil.OpenDir(k.t, -1)}
	args := append([]string{"run", "-m", manifest, "--user", "65534", "--log-dir", s.logDir}, flags...)
	s.cmd = exec.Command(k.bin, append(append(args, "--"), argv...)...)
	s.cmd.Env = append(os.Environ(), "KLOCK_SOCKET="+k.sock)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { _ = s.cmd.Process.Kill() })
	return s
}

// wait waits for klock run to exit with code (-1: any but 0) and reads
// its session's log.
func (s *started) wait(code int) *vlog.Log {
	t := s.k.t
	t.Helper()
	err := s.cmd.Wait()
	got := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if (code >= 0 && got != code) || (code < 0 && got == 0) {
		t.Fatalf("klock run %s: exit %d, want %d\n%s", strings.Join(s.cmd.Args[1:], " "), got, code, s.out.String())
	}
	dirs, _ := filepath.Glob(filepath.Join(s.logDir, "*", vlog.FileName))
	if len(dirs) != 1 {
		t.Fatalf("klock run: %d verification logs in %s\n%s", len(dirs), s.logDir, s.out.String())
	}
	l, err := vlog.Read(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// run is start then wait.
func (k *klockRun) run(manifest string, code int, argv ...string) *vlog.Log {
	return k.start(manifest, nil, argv...).wait(code)
}

// writeAgentFile writes a file the agent owns.
func writeAgentFile(t *testing.T, path string, data []byte) {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, metricsAgentUID, metricsAgentUID); err != nil {
		t.Fatal(err)
	}
}

// waitFor scrapes until ok, for at most a minute (a bound on a hang, not
// a timing assertion), and returns the scrape that satisfied it.
func waitFor(t *testing.T, addr, what string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if f := scrape(t, addr); ok(f) {
			return f
		}
	}
	t.Fatalf("/metrics never showed %s", what)
	return nil
}

// delta is how much a series (summed over labels' matches) moved.
func delta(before, after map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	return value(after, name, labels) - value(before, name, labels)
}

// checkDeltas compares what /metrics moved by with the sessions' logs.
func checkDeltas(t *testing.T, before, after map[string]*dto.MetricFamily, r sessionsRun) {
	t.Helper()
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if d := delta(before, after, name, labels); d != want {
			t.Errorf("%s%v moved by %v, want %v", name, labels, d, want)
		}
	}
	run := map[string]string{"kind": "run", "mode": "strict"}
	check("klock_sessions_total", withLabel(run, "result", "clean"), 3)
	check("klock_sessions_total", withLabel(run, "result", "killed"), 1)
	check("klock_sessions_total", nil, 4)
	check("klock_sessions_active", nil, 0)
	check("klock_session_start_seconds", map[string]string{"kind": "run"}, 4) // histograms: their count
	check("klock_kill_seconds", nil, 1)
	check("klock_violations_total", nil, float64(len(r.killed.Violations)))
	byLabels := map[[3]string]float64{}
	for _, v := range r.killed.Violations {
		pred, obj, _ := strings.Cut(v.Triple, " ")
		typ, _, _ := strings.Cut(obj, ":")
		byLabels[[3]string{pred, typ, v.Action}]++
	}
	if byLabels[[3]string{"PROVIDES", "FILE", "violation-kill"}] == 0 {
		t.Errorf("the killed session's log has no PROVIDES FILE violation-kill: %+v", r.killed.Violations)
	}
	for l, n := range byLabels {
		check("klock_violations_total", map[string]string{"predicate": l[0], "object_type": l[1], "action": l[2]}, n)
	}
	checkKernelDeltas(check, r)
	checkRollbackDeltas(t, check, r)
	checkLeaseDeltas(t, check, r)
	// The observer's exec program runs on every exec on the host, each
	// session's agent's among them: at least four more runs.
	if d := delta(before, after, "klock_bpf_program_runs_total", map[string]string{"backend": "observe", "program": "obs_exec"}); d < 4 {
		t.Errorf("klock_bpf_program_runs_total{observe/obs_exec} moved by %v, want >= 4", d)
	}
	if v := value(after, "klock_bpf_program_run_seconds_total", map[string]string{"backend": "observe", "program": "obs_exec"}); v <= 0 {
		t.Errorf("klock_bpf_program_run_seconds_total{observe/obs_exec} = %v", v)
	}
	for _, fam := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := after[fam]; !ok {
			t.Errorf("no %s: the Go and process collectors are missing", fam)
		}
	}
}

// checkKernelDeltas: events and losses by the sessions' event backend.
func checkKernelDeltas(check func(string, map[string]string, float64), r sessionsRun) {
	events, lost := map[string]float64{}, map[string]float64{}
	for _, l := range r.all() {
		events[metrics.EventBackend(l)] += float64(l.Events)
		lost[metrics.EventBackend(l)] += float64(l.Lost.Total)
	}
	for be, n := range events {
		check("klock_kernel_events_total", map[string]string{"backend": be}, n)
		check("klock_kernel_events_lost_total", map[string]string{"backend": be}, lost[be])
	}
}

// checkRollbackDeltas: the killed session's rollback put data.txt back
// (1000 bytes; the agent's write to it was declared, its next write,
// undeclared, had it killed).
func checkRollbackDeltas(t *testing.T, check func(string, map[string]string, float64), r sessionsRun) {
	t.Helper()
	outcomes := map[string]float64{}
	for _, op := range r.killed.Rollback {
		if op.OK {
			outcomes[op.Action]++
		}
	}
	if outcomes[vlog.RollbackRestored] != 1 {
		t.Errorf("the killed session's rollback: %+v, want data.txt restored", r.killed.Rollback)
	}
	for o, n := range outcomes {
		check("klock_rollback_files_total", map[string]string{"outcome": o}, n)
	}
	check("klock_rollback_files_total", nil, float64(len(r.killed.Rollback)))
	check("klock_rollback_files_total", map[string]string{"outcome": "failed"}, 0)
	check("klock_rollback_bytes_total", nil, 1000)
	check("klock_rollback_seconds", nil, 1)
}

// checkLeaseDeltas: one grant per session, the waiter's deaths, each
// with its conflicts, the lease API's grant, death and revocation, and
// no session denied.
func checkLeaseDeltas(t *testing.T, check func(string, map[string]string, float64), r sessionsRun) {
	t.Helper()
	w := r.waiter.LeaseWait
	if w == nil || w.Deaths == 0 || len(w.Behind) == 0 {
		t.Fatalf("the waiting session's log has no Wait-Die deaths: %+v", w)
	}
	var held float64
	for _, l := range r.all() {
		held += float64(len(l.Leases))
	}
	// The sessions' and the lease API's (leaseAPIRow: one grant, one
	// death on it, one revocation).
	check("klock_lease_decisions_total", map[string]string{"outcome": "granted"}, 4+1)
	check("klock_lease_decisions_total", map[string]string{"outcome": "die"}, float64(w.Deaths+1))
	check("klock_lease_decisions_total", map[string]string{"outcome": "wait"}, float64(w.Waits))
	check("klock_lease_grants_total", nil, held+1)
	check("klock_lease_conflicts_total", nil, float64(w.Deaths*len(w.Behind)+1))
	check("klock_lease_revocations_total", nil, 1)
	check("klock_lease_store_errors_total", nil, 0)
	check("klock_lease_denied_sessions_total", nil, 0)
	check("klock_lease_wait_seconds", nil, 1)
}

// withLabel is labels plus k=v.
func withLabel(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range labels {
		out[a] = b
	}
	return out
}
