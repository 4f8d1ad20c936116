//go:build linux

package unixguard

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// newGuard loads the wall, or skips (fails with KLOCK_REQUIRE_PRIVILEGED=1)
// where the kernel has no cgroup AF_UNIX hooks (detect.UnixHooks).
func newGuard(t testing.TB) *Guard {
	t.Helper()
	testutil.RequirePrivileged(t)
	if err := detect.UnixHooks(); err != nil {
		testutil.Unavailable(t, "no cgroup AF_UNIX hooks on this kernel: "+err.Error())
	}
	g, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Guard.Close: %v", err)
		}
	})
	return g
}

func newCgroup(t testing.TB) *cgroup.Group {
	t.Helper()
	cg, err := cgroup.Create(fmt.Sprintf("unixguard-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Delete(); err != nil {
			t.Errorf("delete cgroup: %v", err)
		}
	})
	return cg
}

func ruleset(t testing.TB, intents ...string) *policy.Ruleset {
	t.Helper()
	// No baseline: the tests count the kernel's entries.
	src := strings.Replace(testutil.ManifestYAML("unixguard-test", "strict", "", intents...), "baseline: system-ro", "baseline: none", 1)
	m, err := policy.Parse("unixguard-test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// listeners is one directory's stream listener (s.sock) and datagram
// receiver (d.sock), recording what reached them.
type listeners struct {
	dir    string
	stream *net.UnixListener
	dgram  *net.UnixConn
}

func listenIn(t testing.TB, dir string) *listeners {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &listeners{dir: dir}
	var err error
	if l.stream, err = net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s.sock"), Net: "unix"}); err != nil {
		t.Fatal(err)
	}
	if l.dgram, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "d.sock"), Net: "unixgram"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.stream.Close(); l.dgram.Close() })
	return l
}

// heard returns how many connections and datagrams reached l. Unix
// sockets deliver synchronously: once the caller's call returned, what it
// sent is queued.
func (l *listeners) heard() (conns int, grams []string) {
	for {
		l.stream.SetDeadline(time.Now().Add(10 * time.Millisecond))
		c, err := l.stream.Accept()
		if err != nil {
			break
		}
		c.Close()
		conns++
	}
	b := make([]byte, 256)
	for {
		l.dgram.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		n, _, err := l.dgram.ReadFrom(b)
		if err != nil {
			break
		}
		grams = append(grams, string(b[:n]))
	}
	return conns, grams
}

func collect(t testing.TB, s *Session, n int) []event.Event {
	t.Helper()
	var evs []event.Event
	timeout := time.After(10 * time.Second)
	for len(evs) < n {
		select {
		case ev := <-s.Events():
			evs = append(evs, ev)
		case l := <-s.Lost():
			t.Fatalf("lost %d events", l.Count)
		case <-timeout:
			t.Fatalf("got %d events, want %d: %v", len(evs), n, evs)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for {
		select {
		case ev := <-s.Events():
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// TestWall: every way to reach an undeclared pathname socket (stream and
// datagram connect, sendto, sendmsg, each message of sendmmsg, by an
// absolute or a relative name, or an unclean one) fails with EPERM before
// its listener hears anything, and is reported as CONSUMES FILE of the
// socket; declared sockets, a socket the process bound in its own scope,
// and abstract names go through.
func TestWall(t *testing.T) {
	g := newGuard(t)
	base := t.TempDir()
	undecl := listenIn(t, filepath.Join(base, "undeclared"))
	decl := listenIn(t, filepath.Join(base, "declared"))
	work := filepath.Join(base, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	hidden, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(decl.dir, ".hidden.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer hidden.Close()
	abstract := fmt.Sprintf("@klock-unixguard-%d", os.Getpid())
	abs, err := net.ListenUnix("unix", &net.UnixAddr{Name: abstract, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer abs.Close()

	cg := newCgroup(t)
	s, err := g.Attach(cg, ruleset(t, "CONSUMES FILE:"+decl.dir+"/**", "MUTATES FILE:"+work+"/**", "PROVIDES FILE:"+work+"/**"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	u := func(n string) string { return filepath.Join(undecl.dir, n) }
	d := func(n string) string { return filepath.Join(decl.dir, n) }
	want := map[string]string{
		"connect:" + u("s.sock"):                      "EPERM",
		"dgconnect:" + u("d.sock"):                    "EPERM",
		"sendto:" + u("d.sock"):                       "EPERM",
		"sendmsg:" + u("d.sock"):                      "EPERM",
		"sendmmsg:" + u("d.sock") + "," + u("d.sock"): "EPERM",
		// The first message goes, the second is refused: the kernel
		// reports the one it sent.
		"sendmmsg:" + d("d.sock") + "," + u("d.sock"):   "1",
		"connect:" + d("s.sock"):                        "ok",
		"connect:" + d(".hidden.sock"):                  "ok",
		"sendto:" + d("d.sock"):                         "ok",
		"connect:" + decl.dir + "/../undeclared/s.sock": "EPERM",
		"connect:" + decl.dir + "/./s.sock":             "EPERM",
		"connect:" + decl.dir + "//s.sock":              "EPERM",
		"connect:" + abstract:                           "ok",
		"own:" + filepath.Join(work, "own.sock"):        "ok",
	}
	ops := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})
	// Relative names, from a working directory in and out of scope.
	rel := []string{"chdir:" + undecl.dir, "connect:s.sock", "sendto:d.sock", "chdir:" + decl.dir, "connect:s.sock", "sendto:d.sock", "chdir:/", "connect:" + strings.TrimPrefix(u("s.sock"), "/")}
	got := runOps(t, cg, append(ops, rel...)...)
	for _, op := range ops {
		if got[op] != want[op] {
			t.Errorf("%s = %q, want %q", op, got[op], want[op])
		}
	}
	// runOps keeps the last result per op: the in-scope relative ones.
	if got["connect:s.sock"] != "ok" || got["sendto:d.sock"] != "ok" {
		t.Errorf("relative names in a declared cwd: connect %q, sendto %q, want ok", got["connect:s.sock"], got["sendto:d.sock"])
	}
	if r := got["connect:"+strings.TrimPrefix(u("s.sock"), "/")]; r != "EPERM" {
		t.Errorf("relative name from / = %q, want EPERM", r)
	}

	if conns, grams := undecl.heard(); conns != 0 || len(grams) != 0 {
		t.Errorf("the undeclared listeners heard %d connections and %q", conns, grams)
	}
	if conns, grams := decl.heard(); conns < 2 || len(grams) < 3 {
		t.Errorf("the declared listeners heard %d connections and %q, want >= 2 and >= 3", conns, grams)
	}

	evs := collect(t, s, 11)
	seen := map[string]int{}
	for _, ev := range evs {
		if ev.Source != event.SourceCgroupUnix || !ev.Blocked || ev.Errno != 1 {
			t.Errorf("event %+v: want a blocked cgroup-unix EPERM", ev)
		}
		seen[ev.Syscall+" "+ev.Triple.String()]++
	}
	for _, w := range []string{
		"connect CONSUMES FILE:" + u("s.sock"),
		"connect CONSUMES FILE:" + u("d.sock"),
		"sendmsg CONSUMES FILE:" + u("d.sock"),
		"connect CONSUMES FILE:" + d("s.sock"), // "/./" and "//": refused, named cleanly
	} {
		if seen[w] == 0 {
			t.Errorf("no event %q in %v", w, seen)
		}
	}
	if n := seen["connect CONSUMES FILE:"+u("s.sock")]; n != 4 {
		// absolute, via "..", relative from its directory and from /
		t.Errorf("%d refusals of %s, want 4: %v", n, u("s.sock"), seen)
	}
	for k := range seen {
		if strings.Contains(k, "declared/d.sock") && !strings.Contains(k, "undeclared") {
			t.Errorf("a declared socket was refused: %s", k)
		}
	}

	// Outside the session cgroup nothing is walled.
	c, err := net.Dial("unix", u("s.sock"))
	if err != nil {
		t.Fatalf("connect from outside the session: %v", err)
	}
	c.Close()
}

// TestUpdate: permissive mode's amended scope reaches the kernel, and the
// old rules go.
func TestUpdate(t *testing.T) {
	g := newGuard(t)
	l := listenIn(t, filepath.Join(t.TempDir(), "x"))
	cg := newCgroup(t)
	s, err := g.Attach(cg, ruleset(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op := "connect:" + filepath.Join(l.dir, "s.sock")
	if got := runOps(t, cg, op)[op]; got != "EPERM" {
		t.Fatalf("before Update: %s", got)
	}
	if err := s.Update(ruleset(t, "CONSUMES FILE:"+filepath.Join(l.dir, "s.sock"))); err != nil {
		t.Fatal(err)
	}
	if got := runOps(t, cg, op)[op]; got != "ok" {
		t.Fatalf("after Update: %s", got)
	}
	if n := entries(g); n != 1 {
		t.Errorf("%d rule entries, want the new rule's 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := entries(g); n != 0 {
		t.Errorf("Close left %d rule entries behind", n)
	}
	if err := s.Update(ruleset(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close: %v, want ErrClosed", err)
	}
}

// TestDecode: a refusal's record becomes the triple bpf-lsm and the
// tracepoints report for the same call.
func TestDecode(t *testing.T) {
	rec := func(hook, flags uint8, path string) []byte {
		b := make([]byte, hdrSize+len(path)+1)
		b[0] = 7 // cgroup id
		b[8], b[12] = 42, 43
		b[16] = byte(len(path) + 1)
		b[20], b[21] = hook, flags
		copy(b[24:], "agent")
		copy(b[hdrSize:], path)
		return b
	}
	for _, c := range []struct {
		b       []byte
		syscall string
		triple  string
	}{
		{rec(hookConnect, 0, "/tmp/x.sock"), "connect", "CONSUMES FILE:/tmp/x.sock"},
		{rec(hookSendmsg, 0, "/tmp/x.sock"), "sendmsg", "CONSUMES FILE:/tmp/x.sock"},
		{rec(hookConnect, flagUnclean, "/tmp/a/../x.sock"), "connect", "CONSUMES FILE:/tmp/x.sock"},
		// No name for the cwd: the relative name, which decide treats as
		// a violation (fail closed).
		{rec(hookConnect, flagNoCwd|flagUnclean, "../x.sock"), "connect", "CONSUMES FILE:../x.sock"},
	} {
		id, ev, ok := decode(c.b, time.Now())
		if !ok || id != 7 || ev.PID != 42 || ev.TID != 43 || ev.Comm != "agent" || ev.Syscall != c.syscall || ev.Triple.String() != c.triple || !ev.Blocked || ev.Source != event.SourceCgroupUnix {
			t.Errorf("decode(%q) = %d %+v %v", c.b[hdrSize:], id, ev, ok)
		}
	}
	if _, _, ok := decode(make([]byte, hdrSize-1), time.Now()); ok {
		t.Error("a short record decoded")
	}
}

func entries(g *Guard) int {
	var (
		n int
		k unixguardKlsmKey
		v unixguardKlsmRule
	)
	for it := g.objs.UgRules.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
}
