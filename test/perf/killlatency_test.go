//go:build linux

package perf

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

// BenchmarkDetectToKill: how long an agent runs on after a violation no
// wall blocks (a chmod: Landlock has no right for it, the tracepoints
// detect it) before klock kills its session: the time from the kernel's
// record of the chmod to klock's cgroup.kill, from the verification log
// (the violation's time and Exit.KilledAt). The agent sleeps after the
// chmod, so the session ends only by the kill. Run with -benchtime Nx.
func BenchmarkDetectToKill(b *testing.B) {
	wd := workdir(b)
	f := filepath.Join(wd, "settings.yaml")
	if err := os.WriteFile(f, []byte("port: 8080\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Chown(f, agentUID, agentUID); err != nil {
		b.Fatal(err)
	}
	m, err := policy.Parse("perf.yaml", []byte(`apiVersion: klock/v1
agent: {id: perf-agent}
mode: strict
workdir: `+wd+`
intents:
  - CONSUMES FILE:${workdir}/**
  - PROVIDES PROC:/usr/bin/dash
  - PROVIDES PROC:/usr/bin/chmod
  - PROVIDES PROC:/usr/bin/sleep
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`))
	if err != nil {
		b.Fatal(err)
	}
	launcher, err := stage2()
	if err != nil && !errors.Is(err, exec.ErrNotFound) {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		var errb bytes.Buffer
		res, err := session.Run(context.Background(), session.Options{
			Manifest: m, Command: []string{"/bin/sh", "-c", "chmod 600 settings.yaml; exec sleep 5"},
			Env: []string{"PATH=/usr/bin:/bin"}, User: &launch.Credential{UID: agentUID, GID: agentUID},
			Stderr: &errb, AllowDegraded: true, LogDir: b.TempDir(), Logger: quiet(),
			Backend: session.Backend(os.Getenv("KLOCK_TEST_BACKEND")), Stage2: launcher,
		})
		if err != nil {
			b.Fatalf("session: %v\n%s", err, errb.String())
		}
		if !res.Killed || len(res.Log.Violations) == 0 || res.Log.Exit.KilledAt.IsZero() {
			b.Fatalf("want a strict kill for the chmod: killed=%v violations=%+v exit=%+v", res.Killed, res.Log.Violations, res.Log.Exit)
		}
		lat = append(lat, res.Log.Exit.KilledAt.Sub(res.Log.Violations[0].Time))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "ms-max")
}
