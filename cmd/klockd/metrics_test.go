//go:build linux

package main

import (
	"bytes"
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

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"
)

const metricsAgentUID = 65534

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
func startKlockd(t *testing.T, args ...string) (sock, addr string) {
	t.Helper()
	bins := testutil.OpenDir(t, -1)
	bin := testutil.BuildCommand(t, bins, "klockd")
	testutil.BuildCommand(t, bins, "klock-stage2")
	dir := testutil.OpenDir(t, -1)
	sock = filepath.Join(dir, "klockd.sock")
	cmd := exec.Command(bin, append([]string{"--socket", sock, "--api-socket", filepath.Join(dir, "api.sock"), "--metrics-listen", "127.0.0.1:0"}, args...)...)
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

// scrape reads klockd's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	return parseMetrics(t, scrapeText(t, addr))
}

// scrapeText is klockd's /metrics as served.
func scrapeText(t *testing.T, addr string) []byte {
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
	return body
}

// parseMetrics parses the text exposition format.
func parseMetrics(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
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
