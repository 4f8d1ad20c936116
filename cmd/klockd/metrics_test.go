//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"
)

const metricsAgentUID = 65534

// TestKlockdServesMetrics: a real klockd with --metrics-listen
// 127.0.0.1:0 runs a clean strict session and a strict session killed for
// a violation; its /metrics moved by exactly those two sessions.
func TestKlockdServesMetrics(t *testing.T) {
	testutil.RequirePrivileged(t)
	sock, addr := startKlockd(t)
	before := scrape(t, addr)
	if v := value(before, "klock_sessions_active", nil); v != 0 {
		t.Fatalf("klock_sessions_active before any session: %v", v)
	}
	wd := agentDir(t)
	data := []byte(testutil.ManifestYAML("metrics-test", "strict", wd, "CONSUMES FILE:${workdir}/**", "PROVIDES PROC:/usr/bin/**"))
	clean := runSession(t, sock, data, "/usr/bin/true")
	if clean.Killed || clean.Log == nil || clean.Log.Verdict != "CLEAN" {
		t.Fatalf("clean session: killed %v log %+v", clean.Killed, clean.Log)
	}
	killed := runSession(t, sock, data, "echo x > "+wd+"/undeclared; sleep 5")
	if !killed.Killed || killed.Log == nil || len(killed.Log.Violations) == 0 {
		t.Fatalf("strict session: killed %v log %+v", killed.Killed, killed.Log)
	}
	after := scrape(t, addr)
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if d := value(after, name, labels) - value(before, name, labels); d != want {
			t.Errorf("%s%v moved by %v, want %v", name, labels, d, want)
		}
	}
	check("klock_sessions_total", map[string]string{"mode": "strict", "result": "clean"}, 1)
	check("klock_sessions_total", map[string]string{"mode": "strict", "result": "killed"}, 1)
	check("klock_sessions_total", nil, 2)
	check("klock_sessions_active", nil, 0)
	check("klock_session_start_seconds", nil, 2) // histograms: their count
	check("klock_kill_seconds", nil, 1)
	check("klock_violations_total", nil, float64(len(killed.Log.Violations)))
	byLabels := map[[3]string]float64{}
	for _, v := range killed.Log.Violations {
		pred, obj, _ := strings.Cut(v.Triple, " ")
		typ, _, _ := strings.Cut(obj, ":")
		byLabels[[3]string{pred, typ, v.Action}]++
	}
	if byLabels[[3]string{"PROVIDES", "FILE", "violation-kill"}] == 0 {
		t.Errorf("the killed session's log has no PROVIDES FILE violation-kill: %+v", killed.Log.Violations)
	}
	for l, n := range byLabels {
		check("klock_violations_total", map[string]string{"predicate": l[0], "object_type": l[1], "action": l[2]}, n)
	}
	check("klock_rollback_files_total", nil, float64(len(clean.Log.Rollback)+len(killed.Log.Rollback)))
	check("klock_rollback_files_total", map[string]string{"outcome": "failed"}, 0)
	if len(clean.Log.Leases) == 0 {
		t.Error("the clean session's log holds no leases: klock_leases_total is untested")
	}
	check("klock_leases_total", map[string]string{"outcome": "granted"}, float64(len(clean.Log.Leases)+len(killed.Log.Leases)))
	check("klock_leases_total", map[string]string{"outcome": "denied"}, 0)
	check("klock_kernel_events_lost_total", nil, float64(clean.Log.Lost.Total+killed.Log.Lost.Total))
	if _, ok := after["go_goroutines"]; !ok {
		t.Error("no Go collector")
	}
	if _, ok := after["process_start_time_seconds"]; !ok {
		t.Error("no process collector")
	}
	if t.Failed() {
		t.Logf("killed session's log: violations %+v rollback %+v", killed.Log.Violations, killed.Log.Rollback)
	}
}

// A metrics address off loopback without TLS stops klockd before it
// starts, saying what to do.
func TestKlockdRefusesInsecureMetricsListen(t *testing.T) {
	testutil.RequirePrivileged(t)
	bin := testutil.BuildCommand(t, t.TempDir(), "klockd")
	dir := t.TempDir()
	for args, want := range map[string]string{
		"--metrics-listen 0.0.0.0:0":               "--metrics-listen 0.0.0.0:0 is not a loopback address: give --metrics-tls-cert and --metrics-tls-key",
		"--metrics-tls-cert c --metrics-tls-key k": "--metrics-listen, which is not set",
	} {
		all := append([]string{"--socket", filepath.Join(dir, "klockd.sock"), "--api-socket", filepath.Join(dir, "api.sock")}, strings.Fields(args)...)
		out, err := exec.Command(bin, all...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("klockd %s: %v\n%s", args, err, out)
		}
	}
}

// startKlockd runs klockd (beside its klock-stage2) with metrics on
// 127.0.0.1:0 until the test ends; it returns its socket and the metrics'
// bound address, read from its log.
func startKlockd(t *testing.T) (sock, addr string) {
	t.Helper()
	bins := testutil.OpenDir(t, -1)
	bin := testutil.BuildCommand(t, bins, "klockd")
	testutil.BuildCommand(t, bins, "klock-stage2")
	dir := testutil.OpenDir(t, -1)
	sock = filepath.Join(dir, "klockd.sock")
	cmd := exec.Command(bin, "--socket", sock, "--api-socket", filepath.Join(dir, "api.sock"), "--metrics-listen", "127.0.0.1:0")
	log := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("klockd on SIGTERM: %v\n%s", err, log.String())
		}
	})
	bound := regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := bound.FindStringSubmatch(log.String()); m != nil {
			if _, err := os.Stat(sock); err == nil {
				return sock, m[1]
			}
		}
	}
	t.Fatalf("klockd did not serve its metrics:\n%s", log.String())
	return "", ""
}

// runSession runs script as a strict session through klockd.
func runSession(t *testing.T, sock string, manifest []byte, script string) *session.Result {
	t.Helper()
	cl, err := daemon.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := cl.Run(context.Background(), &daemon.Run{RunRequest: daemon.RunRequest{
		Manifest: manifest, ManifestPath: "agent.yaml", UID: metricsAgentUID, GID: metricsAgentUID, AllowDegraded: true,
		Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// scrape reads klockd's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", resp.Status, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// value sums the series of a family whose labels include labels: a
// counter's or gauge's value, a histogram's count.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// agentDir is a workdir the agent owns.
func agentDir(t *testing.T) string {
	return testutil.OpenDir(t, metricsAgentUID)
}
