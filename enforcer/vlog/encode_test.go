package vlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// stdEncode is the encoding the file had before encodeTo (json.Encoder,
// indented): the reference for what a reader of the file must get back.
func stdEncode(l *Log) []byte {
	c := *l
	if c.Schema == "" {
		c.Schema = Schema
	}
	if c.Verdict == "" {
		c.Verdict, c.Summary = c.Headline()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// bigLog is a session's log with n observed triples.
func bigLog(n int) *Log {
	l := &Log{Session: "s-1", Agent: "a", Manifest: ManifestRef{Path: "/m.yaml", SHA256: "ab"}, Mode: "strict",
		Start: t0, End: t0.Add(time.Second), Backends: backends,
		Intents: []IntentUse{{Intent: "PROVIDES FILE:/w/**", Origin: "manifest", Uses: uint64(n)}}}
	for i := range n {
		l.Observed = append(l.Observed, Observed{Triple: fmt.Sprintf("PROVIDES FILE:/w/tree/d%03d/f%05d.txt", i/100, i), Count: 1,
			First: t0.Add(time.Duration(i) * time.Microsecond), PID: 42, Comm: "tar", Syscall: "openat", Source: "tracepoint",
			AllowedBy: "PROVIDES FILE:/w/**"})
	}
	return l
}

func TestEncodeSameAsStd(t *testing.T) {
	full := session(t, "strict", nil, 0, Exit{Signal: "SIGKILL", KilledByKlock: true, Reason: "x"}, nil)
	full.Baseline = []IntentUse{{Intent: "CONSUMES FILE:/lib/**", Origin: "baseline:system-ro", Uses: 2}}
	full.Observed = []Observed{{Triple: `MUTATES FILE:/w/a<b>&"c".txt`, Count: 2, Blocked: 1, First: t0, PID: 1, Comm: "sh", Violation: true}}
	full.Violations = []Violation{{Time: t0, Triple: "MUTATES FILE:/etc/hosts", Path: "/etc/hosts", Error: "ScopeViolationError: <x>", Blocked: true, Action: "violation-kill"}}
	full.Amendments = []Amendment{{Time: t0, Intent: "MUTATES FILE:/x", Triple: "MUTATES FILE:/x"}}
	full.Created = []string{"/w/out"}
	full.Rollback = []RollbackOp{{Path: "/w/a", Action: RollbackRestored, OK: true}}
	cases := map[string]*Log{
		"every field set": full,
		"empty lists":     {Session: "s", Observed: []Observed{}, Rollback: []RollbackOp{}, Created: []string{}},
		"nil lists":       {Session: "s"},
		"40k observed":    bigLog(40000),
	}
	for name, l := range cases {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			if err := l.encodeTo(&got); err != nil {
				t.Fatal(err)
			}
			var a, b any
			if err := json.Unmarshal(got.Bytes(), &a); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, got.String())
			}
			if err := json.Unmarshal(stdEncode(l), &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("differs from encoding/json:\n%s\nwant\n%s", got.String(), stdEncode(l))
			}
			if !bytes.HasSuffix(got.Bytes(), []byte("}\n")) {
				t.Fatalf("not newline-terminated")
			}
			// One observed triple a line (grep-able), compact.
			lines := strings.Count(got.String(), "\n    {\"triple\":")
			if lines != len(l.Observed) {
				t.Fatalf("%d observed lines, want %d", lines, len(l.Observed))
			}
		})
	}
	// HTML is not escaped: the file says what the paths say.
	var got bytes.Buffer
	full.encodeTo(&got)
	if !strings.Contains(got.String(), `a<b>&\"c\".txt`) {
		t.Fatalf("escaped: %s", got.String())
	}
}

// TestLogFieldsCoverLog: the encoder's field list is Log's, in order.
func TestLogFieldsCoverLog(t *testing.T) {
	typ := reflect.TypeFor[Log]()
	if len(logFields) != typ.NumField() {
		t.Fatalf("%d fields encoded, Log has %d", len(logFields), typ.NumField())
	}
	for i, f := range logFields {
		if f.index != i {
			t.Fatalf("field %d encoded at %d", f.index, i)
		}
	}
	if f := logFields[len(logFields)-1]; f.name != "exit" || f.list {
		t.Fatalf("last field %+v", f)
	}
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkEncode: the log of a 40k-file session, streamed by encodeTo
// against json.Encoder with SetIndent (the file's encoding before), in the
// same run. ratio < 1 is faster.
func BenchmarkEncode(b *testing.B) {
	l := bigLog(40000)
	var w countingWriter
	measure := func(f func()) (time.Duration, float64) {
		var m0, m1 runtimeMem
		m0.read()
		start := time.Now()
		f()
		d := time.Since(start)
		m1.read()
		return d, float64(m1.alloc-m0.alloc) / (1 << 20)
	}
	var stream, std time.Duration
	var streamMB, stdMB float64
	for b.Loop() {
		d, mb := measure(func() { l.encodeTo(&w) })
		stream, streamMB = stream+d, mb
		d, mb = measure(func() { w.Write(stdEncode(l)) })
		std, stdMB = std+d, mb
	}
	b.ReportMetric(float64(stream.Milliseconds())/float64(b.N), "ms-stream")
	b.ReportMetric(float64(std.Milliseconds())/float64(b.N), "ms-std-indent")
	b.ReportMetric(float64(stream)/float64(std), "ratio")
	b.ReportMetric(streamMB, "MiB-alloc-stream")
	b.ReportMetric(stdMB, "MiB-alloc-std-indent")
}

type runtimeMem struct{ alloc uint64 }

func (m *runtimeMem) read() {
	var s goruntime.MemStats
	goruntime.ReadMemStats(&s)
	m.alloc = s.TotalAlloc
}

// BenchmarkSessionEnd: what klock does between the agent's exit and the
// verification log on disk, for a session of 40k distinct operations (a
// 10k-file untar, find, grep and rm): the engine's records, the log built
// from them, and its encoding.
func BenchmarkSessionEnd(b *testing.B) {
	m, rs := compiled(b)
	e := decide.New(rs, policy.ModeStrict)
	for i := range 40000 {
		e.Observe(event.Event{Time: t0.Add(time.Duration(i) * time.Microsecond), Source: event.SourceTracepoint,
			Triple: policy.FileTriple(policy.Provides, fmt.Sprintf("/srv/repo/build/d%03d/f%05d.txt", i/400, i)), PID: 42, Comm: "tar", Syscall: "openat"})
	}
	var w countingWriter
	b.ReportAllocs()
	for b.Loop() {
		l := New(Session{ID: "s-1", Agent: m.Agent.ID, ManifestPath: "/srv/repo/agent.yaml", ManifestBytes: []byte(manifestYAML), Mode: policy.ModeStrict, Start: t0, Backends: backends})
		l.AddRecords(e.Records())
		l.Finish(t0.Add(time.Second), Exit{}, nil)
		if err := l.encodeTo(&w); err != nil {
			b.Fatal(err)
		}
	}
}
