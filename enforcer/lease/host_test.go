package lease

import (
	"github.com/klocklabs/klock/policy"

	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openHost(t *testing.T, dir string, opts ...HostOption) *Host {
	t.Helper()
	h, err := OpenHost(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func req(t *testing.T, who string, age time.Time, intents ...string) Request {
	var cs []Claim
	for _, s := range intents {
		cs = append(cs, claim(t, s))
	}
	return Request{Holder: Holder{Agent: "agent-" + who, Session: who}, Claims: cs, Age: age}
}

// TestHostSharesLeases: two stores opened on one directory (as two
// processes would) decide against the same leases.
func TestHostSharesLeases(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a, b := openHost(t, dir), openHost(t, dir)
	now := time.Now()
	if d, err := a.Acquire(ctx, req(t, "a", now, "MUTATES FILE:/repo/src/**")); err != nil || d.Outcome != Granted {
		t.Fatalf("a: %v %v", d.Outcome, err)
	}
	d, err := b.Acquire(ctx, req(t, "b", now.Add(time.Second), "MUTATES FILE:/repo/src/x.go"))
	if err != nil || d.Outcome != Die || len(d.Conflicts) != 1 || d.Conflicts[0].Held.Holder.Session != "a" {
		t.Fatalf("b: %+v %v", d, err)
	}
	if d, _ := b.Acquire(ctx, req(t, "b", now.Add(time.Second), "MUTATES FILE:/repo/docs/**")); d.Outcome != Granted {
		t.Fatalf("disjoint: %v", d.Outcome)
	}
	ls, _ := a.List(ctx, Filter{})
	if len(ls) != 2 {
		t.Fatalf("a lists %d leases", len(ls))
	}
	if _, err := b.Heartbeat(ctx, Holder{Agent: "agent-a", Session: "a"}); err != nil {
		t.Fatalf("heartbeat of a through b: %v", err)
	}
	if n, _ := a.Release(ctx, Holder{Agent: "agent-a", Session: "a"}); n != 1 {
		t.Fatalf("released %d", n)
	}
	if d, _ := b.Acquire(ctx, req(t, "b", now.Add(time.Second), "MUTATES FILE:/repo/src/x.go")); d.Outcome != Granted {
		t.Fatalf("after release: %v", d.Outcome)
	}
	if n, _ := a.Revoke(ctx, "b"); n != 2 {
		t.Fatalf("revoked %d", n)
	}
	if ls, _ := b.List(ctx, Filter{}); len(ls) != 0 {
		t.Fatalf("after revoke: %v", ls)
	}
	// A third store, opened now, reads the same history.
	c := openHost(t, dir)
	ls, _ = c.List(ctx, Filter{EndedSince: now})
	if len(ls) != 3 {
		t.Fatalf("a new store remembers %d ended leases, want 3", len(ls))
	}
}

// TestHostExpiry: a holder that stops heartbeating (its store closed, as
// when its process is killed) keeps its leases until ExpiresAt + Grace;
// the next operation of anyone journals the expiry.
func TestHostExpiry(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a, b := openHost(t, dir), openHost(t, dir)
	r := req(t, "a", time.Now(), "MUTATES FILE:/repo/**")
	r.TTL, r.Grace = 150*time.Millisecond, 100*time.Millisecond
	start := time.Now()
	if d, _ := a.Acquire(ctx, r); d.Outcome != Granted {
		t.Fatal(d.Outcome)
	}
	a.Close()
	for {
		d, err := b.Acquire(ctx, req(t, "b", time.Now(), "MUTATES FILE:/repo/x"))
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == Granted {
			break
		}
		if d.Outcome != Die {
			t.Fatal(d.Outcome)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("granted after %v, before TTL + grace", took)
	}
	ls, _ := b.List(ctx, Filter{EndedSince: start})
	var expired bool
	for _, l := range ls {
		expired = expired || (l.Holder.Session == "a" && l.State == Expired)
	}
	if !expired {
		t.Fatalf("no Expired lease of a in %v", ls)
	}
}

// TestHostTornLine: a writer killed in the middle of its line leaves it
// without its newline; readers skip it, the next writer cuts it off, and
// the store goes on.
func TestHostTornLine(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a := openHost(t, dir)
	now := time.Now()
	a.Acquire(ctx, req(t, "a", now, "MUTATES FILE:/repo/a"))
	jp := filepath.Join(dir, journalName)
	f, err := os.OpenFile(jp, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A grant of /repo/b, torn: it never happened.
	f.WriteString(`{"op":"grant","at":"2026-01-01T00:00:00Z","leases":[{"id":"l-00000000000a0000","holder":{"agent":"x","session":"x"},"predicate":"MUTATES","object":"FILE:/repo/b"`)
	f.Close()
	b := openHost(t, dir)
	if d, err := b.Acquire(ctx, req(t, "b", now.Add(time.Second), "MUTATES FILE:/repo/b")); err != nil || d.Outcome != Granted {
		t.Fatalf("after a torn line: %v %v", d.Outcome, err)
	}
	if d, err := a.Acquire(ctx, req(t, "c", now.Add(time.Second), "MUTATES FILE:/repo/b")); err != nil || d.Outcome != Die {
		t.Fatalf("a after the torn line was cut: %v %v", d.Outcome, err)
	}
	data, _ := os.ReadFile(jp)
	if !bytes.HasSuffix(data, []byte("\n")) || bytes.Contains(data, []byte(`"session":"x"`)) {
		t.Fatalf("the torn line is still there:\n%s", data)
	}
}

// TestHostCorrupt: a complete line that is no record stops the store with
// an error that says where and what to do.
func TestHostCorrupt(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a := openHost(t, dir)
	a.Acquire(ctx, req(t, "a", time.Now(), "MUTATES FILE:/repo/a"))
	jp := filepath.Join(dir, journalName)
	f, _ := os.OpenFile(jp, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("this is not a record\n")
	f.Close()
	_, err := a.Acquire(ctx, req(t, "b", time.Now(), "MUTATES FILE:/repo/b"))
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Line != 3 || ce.Path != jp ||
		!strings.Contains(err.Error(), "remove it when no klock session runs") {
		t.Fatalf("got %v", err)
	}
	if _, err := OpenHost(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v", err)
	}
	// Removing it, as the message says, starts afresh.
	os.Remove(jp)
	c := openHost(t, dir)
	if d, err := c.Acquire(ctx, req(t, "b", time.Now(), "MUTATES FILE:/repo/a")); err != nil || d.Outcome != Granted {
		t.Fatalf("after removing: %v %v", d.Outcome, err)
	}
}

// TestHostCompaction: the journal is compacted while another store reads
// it (watching, and one that misses several generations); both keep the
// same leases and the watcher's events replay to them.
func TestHostCompaction(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a := openHost(t, dir, WithCompactSize(4096))
	watching := openHost(t, dir)
	idle := openHost(t, dir)
	ev, stop := watching.Subscribe(100000)
	defer stop()
	churn(t, a, 300, 7, 13, 3)
	if a.gen < 3 {
		t.Fatalf("generation %d: the journal was not compacted", a.gen)
	}
	want, _ := a.List(ctx, Filter{})
	if len(want) == 0 {
		t.Fatal("nothing held")
	}
	for _, s := range []*Host{watching, idle} {
		got, err := s.List(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ids(got)) != fmt.Sprint(ids(want)) {
			t.Fatalf("after compaction:\n got %v\nwant %v", ids(got), ids(want))
		}
	}
	// The watcher's events, replayed, hold what a holds.
	held := map[string]bool{}
	for len(ev) > 0 {
		e := <-ev
		switch e.Type {
		case LeaseGranted:
			held[e.Lease.ID] = true
		case LeaseFreed:
			delete(held, e.Lease.ID)
		}
	}
	if len(held) != len(want) {
		t.Fatalf("events replay to %d leases, want %d", len(held), len(want))
	}
	for _, l := range want {
		if !held[l.ID] {
			t.Fatalf("events miss %s", l.ID)
		}
	}
}

// TestHostCompactionSeenThroughALink: a store that has the journal open
// hears of its compaction even when another name links the old journal
// (so that renaming over it leaves it a link): it is marked replaced.
func TestHostCompactionSeenThroughALink(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a := openHost(t, dir, WithCompactSize(4096))
	b := openHost(t, dir)
	if _, err := b.List(ctx, Filter{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, journalName), filepath.Join(dir, "journal.copy")); err != nil {
		t.Fatal(err)
	}
	churn(t, a, 200, 5, 11, 4)
	if a.gen < 2 {
		t.Fatalf("generation %d: the journal was not compacted", a.gen)
	}
	want, _ := a.List(ctx, Filter{})
	got, err := b.List(ctx, Filter{})
	if err != nil || len(want) == 0 || fmt.Sprint(ids(got)) != fmt.Sprint(ids(want)) {
		t.Fatalf("after compaction (%v):\n got %v\nwant %v", err, ids(got), ids(want))
	}
}

// churn makes n requests of sessions sessions, each for a subtree of one
// of dirs directories, releasing all but every keep-th one granted.
func churn(t *testing.T, h *Host, n, sessions, dirs, keep int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	for i := range n {
		who := fmt.Sprint("s", i%sessions)
		if d, err := h.Acquire(ctx, req(t, who, now, fmt.Sprintf("MUTATES FILE:/repo/%d/**", i%dirs))); err != nil {
			t.Fatal(err)
		} else if d.Outcome == Granted && i%keep != 0 {
			h.Release(ctx, Holder{Agent: "agent-" + who, Session: who})
		}
	}
}

func ids(ls []Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.ID)
	}
	return out
}

// TestHostAwait: a waiter in one store is granted by the release in
// another, oldest first.
func TestHostAwait(t *testing.T) {
	defer noLeak(t)()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a := openHost(t, dir)
	w1s, w2s := openHost(t, dir), openHost(t, dir)
	now := time.Now()
	a.Acquire(ctx, req(t, "a", now, "MUTATES FILE:/repo/**"))
	out := make(chan awaited, 2)
	go func() {
		d, err := w2s.Await(ctx, req(t, "w2", now.Add(-time.Second), "MUTATES FILE:/repo/x"), time.Minute)
		out <- awaited{"w2", d, err}
	}()
	waitFor(t, "w2 to queue", func() bool { return len(queued(w2s.t)) == 1 })
	go func() {
		d, err := w1s.Await(ctx, req(t, "w1", now.Add(-2*time.Second), "MUTATES FILE:/repo/x"), time.Minute)
		out <- awaited{"w1", d, err}
	}()
	waitFor(t, "w1 to queue", func() bool { return len(queued(w1s.t)) == 2 })
	a.Release(ctx, Holder{Agent: "agent-a", Session: "a"})
	got := map[string]awaited{}
	for range 2 {
		r := <-out
		got[r.who] = r
	}
	w1s.Close()
	w2s.Close()
	a.Close()
	// The release granted the oldest waiter, in the releasing process;
	// the younger one then conflicted with an older holder: it died.
	if got["w1"].d.Outcome != Granted || got["w2"].d.Outcome != Die || got["w2"].d.Conflicts[0].Held.Holder.Session != "w1" {
		t.Fatalf("w1 %v %v, w2 %v %v", got["w1"].d.Outcome, got["w1"].err, got["w2"].d.Outcome, got["w2"].err)
	}
	hist := journalHistory(t, dir)
	if hist.first != "" || hist.seen != 2 {
		t.Fatalf("%d grants in the journal: %s", hist.seen, hist.first)
	}
}

func TestHostRefusesSharedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	if _, err := OpenHost(dir); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("got %v", err)
	}
}

// TestHostRefusesWhatItCannotReplay: a claim whose object does not read
// back as itself (an abstract socket name made by the observer, not
// parsed) is refused, never journaled: a record no process can decide
// would stop every klock of the host.
func TestHostRefusesWhatItCannotReplay(t *testing.T) {
	h, err := OpenHost(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	bad := Claim{Predicate: policy.Consumes, Resource: Resource{Type: policy.ObjNet, Net: policy.NetPattern{Host: "@t1-2-3"}}, Intent: "CONSUMES NET:@t1-2-3:0"}
	if _, err := h.Acquire(context.Background(), Request{Holder: Holder{Agent: "a", Session: "s"}, Claims: []Claim{bad}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("acquire of an unreplayable claim: %v, want ErrInvalid", err)
	}
	h2, err := OpenHost(h.Dir())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	h2.Close()
	if _, ok, _ := FromIntent(policy.Intent{Predicate: policy.Consumes, Object: policy.Object{Type: policy.ObjNet, Net: policy.NetPattern{Host: "@x"}}}); ok {
		t.Fatal("an abstract socket name is leased")
	}
}

// TestHostJournalOfAnotherFormat: a journal another klock version wrote
// is refused while its sessions may still hold leases, and started afresh
// once nothing wrote it for longer than any lease can live.
func TestHostJournalOfAnotherFormat(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	j := filepath.Join(dir, "journal")
	old := `{"op":"snapshot","at":"2026-01-01T00:00:00Z","gen":3}` + "\n" + `{"op":"grant","at":"2026-01-01T00:00:00Z","leases":[{"id":"l-1"}]}` + "\n"
	if err := os.WriteFile(j, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	req := Request{Holder: Holder{Agent: "a", Session: "s"}, Claims: []Claim{claim(t, "MUTATES FILE:/repo/**")}}
	h, err := OpenHost(dir)
	if err == nil {
		_, err = h.Acquire(context.Background(), req)
		h.Close()
	}
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "another version") {
		t.Fatalf("a fresh journal of another format: %v, want ErrFormat", err)
	}
	stale := time.Now().Add(-staleAfter - time.Minute)
	if err := os.Chtimes(j, stale, stale); err != nil {
		t.Fatal(err)
	}
	h, err = OpenHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if d, err := h.Acquire(context.Background(), req); err != nil || d.Outcome != Granted {
		t.Fatalf("after it went stale: %+v %v", d, err)
	}
	if b, _ := os.ReadFile(j); !strings.Contains(string(b), `"format":2`) || strings.Contains(string(b), `"l-1"`) {
		t.Fatalf("not started afresh:\n%s", b)
	}
}

// TestHostHistoryReadLate: a new store keeps its snapshot's history lines
// undecoded until the history is asked for; then it has the same history,
// in the same order, as the store that wrote it, with what ended since
// after it; and a compaction that never read them writes them again.
func TestHostHistoryReadLate(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	// A history of 50 a kind: what b keeps of the snapshot's and of the
	// ends it reads after depends on their order.
	small := WithHostTable(WithEndedHistory(50))
	a := openHost(t, dir, WithCompactSize(4096), small)
	churn(t, a, 300, 7, 13, 3)
	if a.gen < 2 {
		t.Fatalf("generation %d: the journal was not compacted", a.gen)
	}
	all := Filter{EndedSince: time.Unix(0, 1)}
	b := openHost(t, dir, WithCompactSize(4096), small)
	b.t.mu.Lock()
	unread := len(b.t.ended.unread)
	b.t.mu.Unlock()
	if unread == 0 {
		t.Fatal("the snapshot's history was decoded at the open")
	}
	// What ended since a time after the snapshot's history needs none of
	// it (a session's start asks that of the leases it must leave).
	if _, err := b.List(ctx, Filter{EndedSince: time.Now()}); err != nil {
		t.Fatal(err)
	}
	b.t.mu.Lock()
	unread = len(b.t.ended.unread)
	b.t.mu.Unlock()
	if unread == 0 {
		t.Fatal("the snapshot's history was decoded for leases ended since now")
	}
	// More ends after the open, then the history: the snapshot's first.
	churn(t, a, 40, 5, 13, 2)
	want, err := a.List(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.List(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ended(got)) != fmt.Sprint(ended(want)) {
		t.Fatalf("history read late:\n got %v\nwant %v", ended(got), ended(want))
	}
	// d, which never read the history, compacts: it writes the
	// snapshot's history lines as they were, then what ended since; a
	// store that reads that has the same history as a.
	d := openHost(t, dir, WithCompactSize(4096), small)
	gen := d.gen
	churn(t, d, 300, 7, 13, 3)
	d.t.mu.Lock()
	unread = len(d.t.ended.unread)
	d.t.mu.Unlock()
	if d.gen <= gen || unread == 0 {
		t.Fatalf("d compacted %d times and has %d lines unread; want a compaction that kept them", d.gen-gen, unread)
	}
	e := openHost(t, dir, small)
	want, _ = a.List(ctx, all)
	for name, s := range map[string]*Host{"d": d, "e": e} {
		got, err := s.List(ctx, all)
		if err != nil || len(want) == 0 || fmt.Sprint(ended(got)) != fmt.Sprint(ended(want)) {
			t.Fatalf("%s, after d's compaction: %v\n got %v\nwant %v", name, err, ended(got), ended(want))
		}
	}
	// Stores that never read the history, one after the other, each
	// compacting, still keep it to its size in the journal: twice it at
	// most, both kinds, before one reads and trims it.
	compactions := 0
	for range 8 {
		f := openHost(t, dir, WithCompactSize(4096), small)
		gen = f.gen
		churn(t, f, 300, 7, 13, 3)
		compactions += int(f.gen - gen)
		f.Close()
	}
	data, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range bytes.Split(data, []byte("\n")) {
		if bytes.HasPrefix(l, endedPrefix) {
			n += bytes.Count(l, leaseStart)
		}
	}
	if compactions < 4 || n == 0 || n > 4*50 {
		t.Fatalf("after %d compactions the snapshot holds %d ended leases; want 1 to %d", compactions, n, 4*50)
	}
}

func ended(ls []Lease) []string {
	var out []string
	for _, l := range ls {
		if l.State != Active {
			out = append(out, l.ID+"@"+l.EndedAt.Format(time.RFC3339Nano)+"/"+l.Resource.String())
		}
	}
	return out
}

// TestHostCorruptHistory: a snapshot's history line that does not decode,
// found when the history is first read, stops the store as a corrupt line
// found at the open does: the error says where, and no later operation
// (nor a compaction, which would drop it) goes on.
func TestHostCorruptHistory(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	a := openHost(t, dir, WithCompactSize(4096))
	churn(t, a, 300, 7, 13, 3)
	jp := filepath.Join(dir, journalName)
	data, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) < 3 || !bytes.HasPrefix(lines[1], endedPrefix) {
		t.Fatalf("no history line after the header:\n%.300s", data)
	}
	// The holder's session gone from every lease of the line: valid JSON,
	// not a record a store writes.
	lines[1] = bytes.ReplaceAll(lines[1], []byte(`"session":"`), []byte(`"x":"`))
	if err := os.WriteFile(jp+".new", bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(jp+".new", jp); err != nil {
		t.Fatal(err)
	}
	b := openHost(t, dir)
	if d, err := b.Acquire(ctx, req(t, "z", time.Now(), "MUTATES FILE:/elsewhere/**")); err != nil || d.Outcome != Granted {
		t.Fatalf("a grant that reads no history: %v %v", d.Outcome, err)
	}
	_, err = b.List(ctx, Filter{EndedSince: time.Unix(0, 1)})
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Line != 2 || ce.Offset != int64(len(lines[0])) || ce.Path != jp {
		t.Fatalf("reading the history: %v", err)
	}
	if _, err := b.Acquire(ctx, req(t, "y", time.Now(), "MUTATES FILE:/other/**")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("after: %v", err)
	}
}

// TestLatestEnd: when a history line's last lease ended, read without
// decoding it; a time it cannot read means "decode me".
func TestLatestEnd(t *testing.T) {
	for line, want := range map[string]int64{
		`{"op":"ended","at":"2026-01-01T00:00:00Z","leases":[{"id":"l-1","ended_at":"2026-01-01T00:00:01Z"},{"id":"l-2","ended_at":"2026-01-01T01:00:00+02:00"},{"id":"l-3","ended_at":"2026-01-01T01:00:00+02:00"}]}`: time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC).UnixNano(),
		`{"op":"ended","at":"2026-01-01T00:00:00Z","leases":[{"id":"l-1","ended_at":"2026-01-01T00:00:01.5Z"}]}`:                                                                                                       time.Date(2026, 1, 1, 0, 0, 1, 5e8, time.UTC).UnixNano(),
		`{"op":"ended","at":"2026-01-01T00:00:00Z","leases":[{"id":"l-1","ended_at":"yesterday"}]}`:                                                                                                                    math.MaxInt64,
		`{"op":"ended","at":"2026-01-01T00:00:00Z","leases":[{"id":"l-1","ended_at":"2026-01-01T00:00:01Z`:                                                                                                             math.MaxInt64,
		`{"op":"ended","at":"2026-01-01T00:00:00Z"}`: 0,
	} {
		if got := latestEnd([]byte(line)); got != want {
			t.Errorf("%s: %d, want %d", line, got, want)
		}
	}
}
