package decide

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

const costEnvelope = `
cost_envelope:
  expected_tokens_in: 1000
  max_tokens_in: 2000
  expected_tokens_out: 100
  max_tokens_out: 200
  expected_latency_ms: 1000
  max_latency_ms: 2000
  context_efficiency: 0.7
  expected_cost: "0.10 USD"
  max_cost: "0.20 USD"
`

// manifest parses a manifest with the given mode, baseline and intents.
func manifest(t testing.TB, mode, baseline string, intents ...string) *policy.Manifest {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: test-agent}\nmode: %s\nworkdir: /srv/repo\nbaseline: %s\nintents:\n", mode, baseline)
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %q\n", in)
	}
	if len(intents) == 0 {
		b.WriteString("  []\n")
	}
	b.WriteString(costEnvelope)
	m, err := policy.Parse("test.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("parse manifest: %v\n%s", err, b.String())
	}
	return m
}

func compile(t testing.TB, m *policy.Manifest) *policy.Ruleset {
	t.Helper()
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock returns a clock that advances one millisecond per call.
func fakeClock() func() time.Time {
	n := 0
	return func() time.Time { n++; return t0.Add(time.Duration(n) * time.Millisecond) }
}

func fileEv(p policy.Predicate, path, syscall string) event.Event {
	return event.Event{Source: event.SourceTracepoint, Triple: policy.FileTriple(p, path), PID: 42, Comm: "agent", Syscall: syscall}
}

func blocked(ev event.Event) event.Event {
	ev.Blocked, ev.Errno, ev.Source = true, 13, event.SourceLandlock
	return ev
}

func netEv(addr string, proto policy.Proto) event.Event {
	return event.Event{Source: event.SourceCgroupNet, Triple: policy.NetTriple(policy.Consumes, netip.MustParseAddrPort(addr), proto), PID: 43, Comm: "curl", Syscall: "connect"}
}

func execEv(path string) event.Event {
	return event.Event{Source: event.SourceTracepoint, Triple: policy.ExecTriple(path), Extra: policy.FileTriple(policy.Consumes, path), PID: 44, Comm: "sh", Syscall: "execve"}
}

func renameEv(src, dst string, replace bool) event.Event {
	p := policy.Provides
	if replace {
		p = policy.Mutates
	}
	return event.Event{Source: event.SourceTracepoint, Triple: policy.FileTriple(policy.Renames, src), Extra: policy.FileTriple(p, dst), PID: 42, Comm: "agent", Syscall: "renameat2"}
}
