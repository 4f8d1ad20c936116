package eventlog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// samples has one record of every kind, as the producers fill them.
func samples() []Record {
	op := &Op{Predicate: "MUTATES", Object: "FILE:/w/x", PID: 42, Comm: "sh", Syscall: "openat", Blocked: true}
	s := Record{Session: "s1", Agent: "a", Mode: "strict", Owner: "uid:1000"}
	with := func(k Kind, f func(*Record)) Record {
		r := s
		r.Kind = k
		f(&r)
		return r
	}
	return []Record{
		with(KindSessionStart, func(r *Record) { r.Start = &Start{PID: 7, Command: []string{"/bin/sh", "-c", "x"}} }),
		with(KindSessionEnd, func(r *Record) {
			r.End = &End{Verdict: "violation", Exit: "signal SIGKILL", Killed: true, Violations: 1, LogPath: "/w/.klock/x"}
		}),
		with(KindViolation, func(r *Record) {
			r.Op, r.Violation = op, &Violation{Action: "violation-kill", Error: "MUTATES FILE:/w/x outside the scope", Needed: "MUTATES FILE:/w/x"}
		}),
		with(KindRefused, func(r *Record) { r.Op = op }),
		with(KindKill, func(r *Record) { r.Reason = "scope violation" }),
		with(KindRollback, func(r *Record) { r.Rollback = &Rollback{Path: "/w/x", Action: "removed", OK: true} }),
		with(KindDNSRefused, func(r *Record) { r.Op = &Op{Predicate: "CONSUMES", Object: "NET:evil.example:53/udp"} }),
		with(KindLeaseGrant, func(r *Record) { r.Lease = &Lease{Count: 1, Leases: []string{"l1 MUTATES FILE:/w/**"}} }),
		with(KindLeaseWait, func(r *Record) { r.Lease = &Lease{ID: "l0", Holder: "s0"} }),
		with(KindLeaseDie, func(r *Record) { r.Lease = &Lease{ID: "l0", Holder: "s0"} }),
		{Kind: KindLeaseRevoke, Lease: &Lease{ID: "s0", Count: 2}},
		{Kind: KindApprovalAsked, Tool: &Tool{Name: "deploy", Call: "c1"}},
		{Kind: KindApprovalGiven, Tool: &Tool{Name: "deploy", Call: "c1", Approver: "alice"}},
		{Kind: KindBudgetRefused, Tool: &Tool{Name: "search", Reason: "over budget"}},
		{Kind: KindToolDenied, Tool: &Tool{Name: "rm", Reason: "not declared"}},
		with(KindObserved, func(r *Record) { r.Op = &Op{Predicate: "CONSUMES", Object: "FILE:/etc/hosts"} }),
	}
}

// TestSchemaAcceptsEveryKind: each kind's record, as published, is valid
// against the published schema, and Kinds is the schema's enum.
func TestSchemaAcceptsEveryKind(t *testing.T) {
	h := NewHub("test", 0)
	rd := h.Subscribe(Filter{All: true}, true, 64)
	seen := map[Kind]bool{}
	for _, r := range samples() {
		h.Publish(r)
	}
	h.Close()
	for {
		r, err := rd.Next(context.Background())
		if errors.Is(err, ErrClosed) {
			break
		}
		b, _ := json.Marshal(r)
		if err := Validate(b); err != nil {
			t.Errorf("%s: %v\n%s", r.Kind, err, b)
		}
		seen[r.Kind] = true
	}
	var s struct {
		Properties struct {
			Kind struct {
				Enum []Kind `json:"enum"`
			} `json:"kind"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(kindsOf(s.Properties.Kind.Enum), ","), strings.Join(kindsOf(Kinds), ","); got != want {
		t.Errorf("schema kinds %s, Kinds %s", got, want)
	}
	for _, k := range Kinds {
		if !seen[k] && k != KindLost {
			t.Errorf("no sample of kind %s", k)
		}
	}
}

func kindsOf(ks []Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// TestSchemaRejects: the schema is not a formality: a record missing its
// kind's part, or with a field it does not know, is refused.
func TestSchemaRejects(t *testing.T) {
	for name, line := range map[string]string{
		"violation without op":   `{"v":1,"time":"2026-01-01T00:00:00Z","kind":"violation","session":"s","violation":{"action":"violation-kill","error":"x"}}`,
		"unknown field":          `{"v":1,"time":"2026-01-01T00:00:00Z","kind":"kill","session":"s","reason":"x","extra":1}`,
		"wrong version":          `{"v":2,"time":"2026-01-01T00:00:00Z","kind":"kill","session":"s","reason":"x"}`,
		"lost without count":     `{"v":1,"time":"2026-01-01T00:00:00Z","kind":"lost"}`,
		"unknown rollback field": `{"v":1,"time":"2026-01-01T00:00:00Z","kind":"rollback","session":"s","rollback":{"path":"/x","action":"removed","ok":true,"mtime":3}}`,
	} {
		if err := Validate([]byte(line)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestSlowReaderLoses: a reader that does not read loses what its ring
// cannot hold, the publisher never waits, and the reader is told how
// many it lost, in their place; a reader that keeps up loses nothing.
func TestSlowReaderLoses(t *testing.T) {
	h := NewHub("test", 0)
	slow := h.Subscribe(Filter{}, true, 8)
	fast := h.Subscribe(Filter{}, true, 1000)
	const n = 100
	for i := range n {
		h.Publish(Record{Kind: KindKill, Session: "s", Reason: string(rune('a' + i%26))})
	}
	h.Close()
	var got []Record
	for {
		r, err := slow.Next(context.Background())
		if err != nil {
			break
		}
		got = append(got, r)
	}
	if len(got) != 8 {
		t.Fatalf("slow reader got %d records, want its ring of 8", len(got))
	}
	last := got[7]
	if last.Kind != KindLost || last.Lost != n-7 {
		t.Fatalf("last record %+v, want lost %d", last, n-7)
	}
	b, _ := json.Marshal(last)
	if err := Validate(b); err != nil {
		t.Errorf("lost record: %v", err)
	}
	for i, r := range got[:7] {
		if r.Seq != uint64(i+1) {
			t.Errorf("record %d seq %d", i, r.Seq)
		}
	}
	count := 0
	for {
		r, err := fast.Next(context.Background())
		if err != nil {
			break
		}
		if r.Kind == KindLost {
			t.Fatal("fast reader lost records")
		}
		count++
	}
	if count != n {
		t.Errorf("fast reader got %d, want %d", count, n)
	}
}

// TestLossThenMore: records published after the reader caught up follow
// the lost record, in order.
func TestLossThenMore(t *testing.T) {
	h := NewHub("test", 0)
	rd := h.Subscribe(Filter{}, true, 2)
	for range 5 {
		h.Publish(Record{Kind: KindKill, Session: "s", Reason: "r"})
	}
	ctx := context.Background()
	var kinds []string
	for range 2 {
		r, _ := rd.Next(ctx)
		kinds = append(kinds, string(r.Kind))
	}
	h.Publish(Record{Kind: KindSessionEnd, Session: "s", End: &End{Verdict: "clean", Exit: "0"}})
	r, _ := rd.Next(ctx)
	kinds = append(kinds, string(r.Kind))
	if got := strings.Join(kinds, ","); got != "kill,lost,session.end" {
		t.Errorf("got %s", got)
	}
}

// TestFilters: session, owner and since select; observed records go only
// to readers that asked, and WantsObserved says whether any did.
func TestFilters(t *testing.T) {
	h := NewHub("test", 0)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.Publish(Record{Time: t0, Kind: KindKill, Session: "s1", Owner: "uid:1", Reason: "old"})
	h.Publish(Record{Time: t0.Add(time.Hour), Kind: KindKill, Session: "s2", Owner: "uid:2", Reason: "new"})
	h.Publish(Record{Time: t0.Add(time.Hour), Kind: KindObserved, Session: "s2", Owner: "uid:2", Op: &Op{Predicate: "CONSUMES", Object: "FILE:/x"}})
	read := func(f Filter) []string {
		rd := h.Subscribe(f, false, 0)
		var out []string
		for {
			r, err := rd.Next(context.Background())
			if err != nil {
				return out
			}
			out = append(out, r.Session+":"+r.Reason)
		}
	}
	for _, c := range []struct {
		f    Filter
		want string
	}{
		{Filter{Since: t0}, "s1:old,s2:new"},
		{Filter{Since: t0.Add(time.Minute)}, "s2:new"},
		{Filter{Since: t0, Session: "s1"}, "s1:old"},
		{Filter{Since: t0, Owner: "uid:2"}, "s2:new"},
		{Filter{}, ""},
	} {
		if got := strings.Join(read(c.f), ","); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
	if h.WantsObserved() {
		t.Fatal("WantsObserved without an --all reader")
	}
	all := h.Subscribe(Filter{All: true}, true, 0)
	if !h.WantsObserved() {
		t.Fatal("an --all reader is not seen")
	}
	all.Close()
	if h.WantsObserved() {
		t.Fatal("WantsObserved after the --all reader left")
	}
}

// TestRecordBounds: what the agent names cannot make a record unbounded.
func TestRecordBounds(t *testing.T) {
	h := NewHub("test", 0)
	rd := h.Subscribe(Filter{}, true, 0)
	long := strings.Repeat("é", 10000)
	cmd := make([]string, 1000)
	h.Publish(Record{Kind: KindSessionStart, Session: "s", Start: &Start{Command: cmd}})
	h.Publish(Record{Kind: KindViolation, Session: "s", Op: &Op{Predicate: "MUTATES", Object: "FILE:/" + long}, Violation: &Violation{Action: "violation-kill", Error: long}})
	for range 2 {
		r, _ := rd.Next(context.Background())
		b, _ := json.Marshal(r)
		if len(b) > 3*maxString+2048 {
			t.Errorf("%s record of %d bytes", r.Kind, len(b))
		}
		if err := Validate(b); err != nil {
			t.Error(err)
		}
	}
}

// TestFileRotates: the file rotates at its size, keeps Keep old files,
// and every line of every file is a whole, valid record.
func TestFileRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	f, err := OpenFile(path, FileOptions{MaxSize: 2000, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHub("test", 0)
	rd := h.Subscribe(Filter{}, true, 1000)
	done := make(chan struct{})
	go func() { f.Run(context.Background(), rd, func(err error) { t.Error(err) }); close(done) }()
	for range 100 {
		h.Publish(Record{Kind: KindRollback, Session: "s", Rollback: &Rollback{Path: "/w/some/file", Action: "restored", OK: true}})
	}
	h.Close()
	<-done
	names, _ := filepath.Glob(path + "*")
	if len(names) != 3 {
		t.Fatalf("files %v, want PATH, PATH.1, PATH.2", names)
	}
	var lastSeq uint64
	for _, name := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 2000 {
			t.Errorf("%s is %d bytes, over its 2000", name, st.Size())
		}
		if st.Mode().Perm() != 0o640 {
			t.Errorf("%s mode %v", name, st.Mode())
		}
		fh, _ := os.Open(name)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if err := Validate(sc.Bytes()); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			var r Record
			_ = json.Unmarshal(sc.Bytes(), &r)
			if r.Seq <= lastSeq {
				t.Errorf("%s: seq %d after %d", name, r.Seq, lastSeq)
			}
			lastSeq = r.Seq
		}
		fh.Close()
	}
	if lastSeq != 100 {
		t.Errorf("last seq %d, want 100", lastSeq)
	}
}

// TestParseSince: durations back from now, RFC 3339 times, typed errors.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if got, _ := ParseSince("10m", now); !got.Equal(now.Add(-10 * time.Minute)) {
		t.Errorf("10m: %v", got)
	}
	if got, _ := ParseSince("2026-01-01T11:00:00Z", now); !got.Equal(now.Add(-time.Hour)) {
		t.Errorf("rfc3339: %v", got)
	}
	for _, bad := range []string{"yesterday", "-5m"} {
		if _, err := ParseSince(bad, now); !errors.Is(err, ErrBadSince) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestText: one readable line, agent-named strings quoted.
func TestText(t *testing.T) {
	r := samples()[2]
	r.Time = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Op.Object = "FILE:/w/a\x1b[2Jb"
	got := Text(r)
	if strings.ContainsRune(got, 0x1b) || strings.Contains(got, "\n") {
		t.Errorf("unsafe line %q", got)
	}
	for _, want := range []string{"violation", "session=s1", "violation-kill", `"FILE:/w/a\x1b[2Jb"`, "pid=42"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
