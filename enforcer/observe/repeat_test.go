//go:build linux && (amd64 || arm64)

package observe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRepeatedOpensAreCounted: a file opened n times the same way is
// reported once; Repeats gives that record back standing for the other
// n-1 (itself and Repeat more), so the total is exact. A directory's opens
// are all reported (the resolver learns directories from them).
func TestRepeatedOpensAreCounted(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := t.TempDir()
	file, sub := filepath.Join(dir, "f"), filepath.Join(dir, "d")
	os.WriteFile(file, []byte("x"), 0o644)
	os.Mkdir(sub, 0o755)
	const n = 1000
	for _, p := range []string{file, sub} {
		cmd := exec.Command(os.Args[0], p, strconv.Itoa(n))
		cmd.Env = append(os.Environ(), helperEnv+"=loop")
		s.inCgroup(cmd)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("loop %s: %v %s", p, err, out)
		}
	}
	ctx := t.Context()
	if err := o.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	reps, err := s.w.Repeats()
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unwatch(s.g.ID); err != nil {
		t.Fatal(err)
	}
	for r := range s.w.Records() {
		s.got = append(s.got, r)
	}
	count := func(rs []Record, path string) (recs int, ops uint64) {
		for _, r := range rs {
			if r.Kind == KindEvent && r.Event.Syscall == "openat" && r.Event.Triple.Path == path {
				recs++
				ops += 1 + r.Event.Repeat
			}
		}
		return
	}
	// One record, the rest counted under it; a rename anywhere on the
	// host meanwhile (a build cache's atomic write, another test: the
	// global rename generation) may have changed a name, so the next open
	// is reported again and its repeats counted under it. The total stays
	// exact.
	recs, reported := count(s.got, file)
	repRecs, repeated := count(reps, file)
	if recs < 1 || recs > 10 || repRecs > recs || reported+repeated != n {
		t.Errorf("file: %d records for %d opens and %d records standing for %d more, want 1 record (a few at most) and the rest counted, %d in all",
			recs, reported, repRecs, repeated, n)
	}
	if recs, _ := count(s.got, sub); recs != n {
		t.Errorf("directory: %d records, want %d (never counted)", recs, n)
	}
	// Unwatch forgot the session's counters.
	var k seenKey
	var v uint64
	for it := o.objs.Seen.Iterate(); it.Next(&k, &v); {
		if k.Cgid == s.g.ID {
			t.Fatalf("counted open of cgroup %d outlived Unwatch: %+v", k.Cgid, k)
		}
	}
}

// TestProcessEventsNeedNoSyscallTracepoint: a ProcessEvents watch gets the
// process events and no file record, and attaches no syscall tracepoint; a
// full watch attaches them until it goes.
func TestProcessEventsNeedNoSyscallTracepoint(t *testing.T) {
	o := loadObserver(t)
	if o.SyscallsAttached() {
		t.Fatal("syscall programs attached with no watch")
	}
	s := newSessionOpts(t, o, ProcessEvents())
	if o.SyscallsAttached() {
		t.Error("a ProcessEvents watch attached the syscall programs")
	}
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", "echo x > "+filepath.Join(dir, "f")+"; cat "+filepath.Join(dir, "f")+" >/dev/null")
	s.inCgroup(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s.drain(t)
	var execs int
	for _, r := range s.got {
		if r.Kind != KindEvent {
			continue
		}
		switch r.Event.Syscall {
		case "exec", "execve":
			execs++
		case "fork", "exit":
		default:
			t.Errorf("ProcessEvents watch got %s %s", r.Event.Syscall, r.Event.Triple)
		}
	}
	if execs == 0 {
		t.Errorf("no exec record; got:\n%s", describe(s.got))
	}
	full := newSession(t, o)
	if !o.SyscallsAttached() {
		t.Error("a full watch left the syscall programs detached")
	}
	if err := o.Unwatch(full.g.ID); err != nil {
		t.Fatal(err)
	}
	if o.SyscallsAttached() {
		t.Error("syscall programs still attached after the last full watch went")
	}
}

// TestSyscallLinger: with SyscallLinger the syscall programs stay attached
// after the last full watch goes, a watch arriving meanwhile keeps them
// (and is observed: its records arrive), and they are detached once the
// linger passes with no full watch.
func TestSyscallLinger(t *testing.T) {
	const linger = 300 * time.Millisecond
	o := loadObserverOpts(t, Options{SyscallLinger: linger})
	first := newSession(t, o)
	if err := o.Unwatch(first.g.ID); err != nil {
		t.Fatal(err)
	}
	if !o.SyscallsAttached() {
		t.Fatal("detached at once despite SyscallLinger")
	}
	second := newSession(t, o)
	time.Sleep(2 * linger) // past the first linger: the second watch holds them
	if !o.SyscallsAttached() {
		t.Fatal("detached while a full watch exists")
	}
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", "mkdir "+filepath.Join(dir, "made"))
	second.inCgroup(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	second.drain(t)
	var mkdir bool
	for _, r := range relevant(second.got, dir) {
		mkdir = mkdir || r.Event.Triple.String() == "PROVIDES FILE:"+filepath.Join(dir, "made")
	}
	if !mkdir {
		t.Errorf("no mkdir record for the watch that came during the linger; got:\n%s", describe(second.got))
	}
	// drain unwatched the second: the linger starts again.
	if !o.SyscallsAttached() {
		t.Fatal("detached at once after the second watch went")
	}
	deadline := time.Now().Add(10 * time.Second)
	for o.SyscallsAttached() {
		if time.Now().After(deadline) {
			t.Fatal("syscall programs still attached 10 s after the last full watch went")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSetSyscallLinger: a linger changed on the running observer applies
// when the next last full watch goes: none, and the programs detach at
// once.
func TestSetSyscallLinger(t *testing.T) {
	o := loadObserverOpts(t, Options{SyscallLinger: time.Hour})
	first := newSession(t, o)
	if err := o.Unwatch(first.g.ID); err != nil {
		t.Fatal(err)
	}
	if !o.SyscallsAttached() {
		t.Fatal("detached at once despite an hour's SyscallLinger")
	}
	o.SetSyscallLinger(0)
	second := newSession(t, o)
	if err := o.Unwatch(second.g.ID); err != nil {
		t.Fatal(err)
	}
	if o.SyscallsAttached() {
		t.Fatal("still attached after the last full watch went with the linger set to none")
	}
}

// TestRepeatCacheForgetsOutsideRenames: a file the agent has opened is
// renamed by a process outside the session; the agent's opens of the new
// name are reported under the new name, not counted as repeats of the
// old one (the cache is keyed by the dentry, which a rename keeps).
func TestRepeatCacheForgetsOutsideRenames(t *testing.T) {
	o := loadObserver(t)
	s := newSession(t, o)
	dir := t.TempDir()
	a, b, ready := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "ready")
	if err := os.WriteFile(a, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `cat "$1" >/dev/null; cat "$1" >/dev/null; : >"$3"
while [ -e "$1" ]; do :; done
cat "$2" >/dev/null; cat "$2" >/dev/null`, "sh", a, b, ready)
	s.inCgroup(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second) // a hang guard
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the agent never got ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.Rename(a, b); err != nil { // by this process: outside the session
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	reps, err := s.w.Repeats() // after Sync: every first record is in
	if err != nil {
		t.Fatal(err)
	}
	s.drain(t)
	opens := func(rs []Record, path string) (ops uint64) {
		for _, r := range rs {
			if r.Kind == KindEvent && strings.HasPrefix(r.Event.Syscall, "open") && r.Event.Triple.Path == path {
				ops += 1 + r.Event.Repeat
			}
		}
		return ops
	}
	all := append(append([]Record(nil), s.got...), reps...)
	if got := opens(all, a); got != 2 {
		t.Errorf("opens logged under the old name %s: %d, want 2; got:\n%s", a, got, describe(all))
	}
	if got := opens(all, b); got != 2 {
		t.Errorf("opens logged under the new name %s: %d, want 2; got:\n%s", b, got, describe(all))
	}
}
