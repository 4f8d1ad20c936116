//go:build linux

// Package escape tries to get out of a klock session in every way we know
// of, against this host's backend (Landlock + tracepoints + cgroup-net +
// seccomp + namespaces), and asserts the exact outcome of each attempt.
package escape

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/lsm"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { harness.Main(m) }

// KnownEscapesEnv runs the rows that document a real escape (they fail
// until it is fixed). Unset, they skip with the reason.
const KnownEscapesEnv = "KLOCK_KNOWN_ESCAPES"

// expect is the exact outcome of one attempt on this backend.
type expect int

const (
	// blocked: the kernel refused the attack step (the errno is asserted),
	// the violation is in the log (as blocked when the errno is EACCES or
	// EPERM: the observer's definition), the strict session was killed, and
	// the target is unchanged.
	blocked expect = iota
	// detected: the attack step completed (a residual of the walls), the
	// violation is in the log as not blocked, and the strict session was
	// killed after the effect (rollback, once the snapshot is wired, undoes
	// it: see harness.AssertRestored).
	detected
	// refusedInScope: the kernel refused the step, and nothing outside the
	// manifest was attempted as klock sees it: no violation, no kill.
	refusedInScope
	// refusedUnlogged: refused by a wall (seccomp, memfd_noexec) for a
	// syscall the tracepoint backend does not report as an operation: no
	// violation, no kill, the wall alone holds.
	refusedUnlogged
	// allowed: the step is in scope and goes through (attack=ok): no
	// violation, no kill. It pins what a wall must leave usable.
	allowed
)

func (e expect) String() string {
	return [...]string{"blocked", "detected", "refused-in-scope", "refused-unlogged", "allowed"}[e]
}

// env is one attempt's world: the standard layout plus the session id.
//
//	<W>/ro.txt             CONSUMES only (CONSUMES FILE:<W>/**)
//	<W>/rw/mine.txt        MUTATES, PROVIDES <W>/rw/**; DELETES, RENAMES <W>/rw/*
//	<W>/out/precious.txt   PROVIDES <W>/out/** only: an existing file the
//	                       agent may create next to but not change
//	<O>/secret.txt         outside every intent (owned by the agent: only
//	                       klock stands in the way)
type env struct {
	*harness.World
	ID string
	// unix: the AF_UNIX listeners a row's setup made (unixListen).
	unix *unixListeners
}

const (
	roContent       = "read-only\n"
	mineContent     = "mine\n"
	preciousContent = "precious\n"
	secretContent   = "secret\n"
)

func newEnv(t *testing.T) *env {
	w := harness.NewWorld(t)
	w.File(w.W("ro.txt"), roContent)
	w.File(w.W("rw", "mine.txt"), mineContent)
	w.File(w.W("out", "precious.txt"), preciousContent)
	w.File(w.O("secret.txt"), secretContent)
	return &env{World: w, ID: harness.NewID()}
}

// intents declare rw's contents removable and renamable (rw/*), not rw
// itself: a directory the agent may remove and make again cannot keep a
// Landlock rule of its own (launch's settle.go puts the rule on the
// workdir, where the observer decides instead of the wall), and this
// suite checks what the wall blocks. test/e2e's TestReplaceableDirectoryIsDetected
// covers the other layout.
func (e *env) intents() []string {
	rw := e.W("rw") + "/**"
	return append([]string{
		"CONSUMES FILE:" + e.Workdir + "/**",
		"MUTATES FILE:" + rw, "PROVIDES FILE:" + rw, "DELETES FILE:" + e.W("rw") + "/*", "RENAMES FILE:" + e.W("rw") + "/*",
		"PROVIDES FILE:" + e.W("out") + "/**",
	}, harness.ProbeIntents()...)
}

type row struct {
	name string
	why  string
	// extra intents beyond env.intents.
	extra func(e *env) []string
	// intents, when set, replace env.intents (harness.ProbeIntents are
	// always added).
	intents func(e *env) []string
	setup   func(t *testing.T, e *env)
	// steps are probe steps; the last one is the attack.
	steps func(e *env) []string
	// cmd, instead of steps, runs an interpreter that prints
	// "attack=ok" or "attack=<ERRNO>".
	cmd   func(e *env) []string
	want  expect
	errno string // the attack step's result for blocked/refused rows
	// triple is the violation (blocked, detected); declared is what the
	// manifest declares on its object, as the error prints it.
	triple   func(e *env) string
	declared string
	// via is the other name the violation reached its file through (a
	// hard link or rename), as the error says it: "through the hard link
	// <path>"; nil when direct.
	via func(e *env) string
	// check inspects the world after the session.
	check  func(t *testing.T, e *env, o *harness.Outcome) // prefix: triple is a prefix of the logged triple (an fd number).
	prefix bool
	// escape marks a real escape found by this suite: the row asserts the
	// secure outcome and runs only with KLOCK_KNOWN_ESCAPES set.
	escape string
	// gap marks a logging defect that is not an escape (the attempt is
	// still refused and killed, but the log names the object wrongly).
	// With KLOCK_KNOWN_ESCAPES set the row demands the correct triple;
	// otherwise it also accepts gapTriple (a prefix) and says so.
	gap       string
	gapTriple func(e *env) string
	// strictReason: the strict kill has no ScopeViolationError, only this
	// reason (a prefix); the permissive run then asserts only the effect.
	strictReason string
	// lsm, when set, is the row's outcome on the bpf-lsm backend where the
	// generic reading (lsmRow) does not fit.
	lsm *row
	// kernel, when set, is the row's outcome on a kernel that lacks what
	// why relies on (a Landlock ABI, vm.memfd_noexec), probed as klock
	// probes it: the fallback, asserted, never skipped. nil where the
	// kernel has it (the row as written, or its lsm reading).
	kernel func() *row
}

// hereRow is r's expected outcome on this kernel and wall.
func hereRow(r row) row {
	if r.kernel != nil {
		if o := r.kernel(); o != nil {
			return overlay(r, *o)
		}
	}
	if harness.LSM() {
		return lsmRow(r)
	}
	return r
}

// overlay is o, an outcome, on r's attack: the name, intents, setup and
// (unless o has its own) steps and check are r's.
func overlay(r, o row) row {
	o.name, o.extra, o.intents, o.setup = r.name, r.extra, r.intents, r.setup
	if o.steps == nil && o.cmd == nil {
		o.steps, o.cmd = r.steps, r.cmd
	}
	if o.check == nil {
		o.check = r.check
	}
	return o
}

// lsmRow is r's expected outcome on the bpf-lsm backend: every file
// operation with a path hook is refused before its effect with EPERM
// (Landlock's rows say EACCES; its detected residuals become refusals), and
// the log names the kernel's object, so logging gaps are gone.
func lsmRow(r row) row {
	if r.lsm != nil {
		return overlay(r, *r.lsm)
	}
	switch {
	case r.want == blocked && (r.errno == "EACCES" || r.errno == "EXDEV"):
		// EXDEV: Landlock's refusal of a link that would widen access.
		r.errno = "EPERM"
	case r.want == detected:
		r.want, r.errno = blocked, "EPERM"
	}
	r.gap = ""
	return r
}

func unchanged(p func(e *env) string, want string) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, _ *harness.Outcome) {
		t.Helper()
		if got := e.Content(p(e)); got != want {
			t.Errorf("%s = %q, want unchanged %q", p(e), got, want)
		}
	}
}

func absent(p func(e *env) string) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, _ *harness.Outcome) {
		t.Helper()
		if e.Exists(p(e)) {
			t.Errorf("%s exists", p(e))
		}
	}
}

// changedTo asserts a detected change of p: in permissive mode it landed
// (proof the wall let it through); in strict mode the kill's rollback put
// the pre-session content orig back.
func changedTo(p func(e *env) string, landed, orig string) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, o *harness.Outcome) {
		t.Helper()
		if harness.LSM() {
			// Refused before the effect, in both modes: nothing to undo.
			if got := e.Content(p(e)); got != orig {
				t.Errorf("%s = %q, want %q untouched (bpf-lsm refuses before the effect)", p(e), got, orig)
			}
			return
		}
		if o.Log.Mode == policy.ModeStrict {
			e.AssertRestored(o, map[string]string{p(e): orig})
			return
		}
		if got := e.Content(p(e)); got != landed {
			t.Errorf("%s = %q, want %q (the residual let the change through)", p(e), got, landed)
		}
	}
}

// chmodded checks a detected chmod to 0777 of p: landed in permissive
// mode; in strict mode rolled back to 0644, a file outside the workdir and
// the wall's scopes included (the agent owns it in these tests: the
// pre-flight backup records the metadata of what it owns in /tmp, where
// they live).
func chmodded(p func(e *env) string) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, o *harness.Outcome) {
		t.Helper()
		st, err := os.Stat(p(e))
		if err != nil {
			t.Fatal(err)
		}
		got := st.Mode().Perm()
		switch {
		case harness.LSM():
			if got != 0o644 {
				t.Errorf("%s mode %v, want 0644 untouched (bpf-lsm refuses before the effect)", p(e), got)
			}
		case o.Log.Mode != policy.ModeStrict:
			if got != 0o777 {
				t.Errorf("%s mode %v, want 0777 (the chmod landed)", p(e), got)
			}
		case got != 0o644:
			t.Errorf("%s mode %v after the strict kill, want 0644 restored", p(e), got)
		}
		if o.Log.Mode == policy.ModeStrict {
			e.AssertRestored(o, nil)
		}
	}
}

var (
	ro       = func(e *env) string { return e.W("ro.txt") }
	mine     = func(e *env) string { return e.W("rw", "mine.txt") }
	precious = func(e *env) string { return e.W("out", "precious.txt") }
	secret   = func(e *env) string { return e.O("secret.txt") }
)

func file(pred string, p func(e *env) string) func(e *env) string {
	return func(e *env) string { return pred + " FILE:" + p(e) }
}

func steps(s ...func(e *env) string) func(e *env) []string {
	return func(e *env) []string {
		out := make([]string, len(s))
		for i, f := range s {
			out[i] = f(e)
		}
		return out
	}
}

func lit(s string) func(e *env) string { return func(*env) string { return s } }

func op(name string, args ...func(e *env) string) func(e *env) string {
	return func(e *env) string {
		parts := make([]string, len(args))
		for i, a := range args {
			parts[i] = a(e)
		}
		return name + ":" + strings.Join(parts, ">")
	}
}

func at(rel ...string) func(e *env) string { return func(e *env) string { return e.W(rel...) } }
func out(rel ...string) func(e *env) string {
	return func(e *env) string { return e.O(rel...) }
}

// listeners shared by the network rows.
type nets struct {
	decl                     *net.TCPListener // the declared port (a NET intent: the agent's namespace is joined to the host by netwall)
	tcp4, tcp6               *net.TCPListener
	udp4, udp6               *net.UDPConn
	declPort, tcpPort, tcp6P int
	udpPort, udp6Port        int
}

func listen(t *testing.T) *nets {
	t.Helper()
	n := &nets{}
	var err error
	tcp := func(network, ip string) (*net.TCPListener, int) {
		l, err := net.ListenTCP(network, &net.TCPAddr{IP: net.ParseIP(ip)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l, l.Addr().(*net.TCPAddr).Port
	}
	udp := func(network, ip string) (*net.UDPConn, int) {
		c, err := net.ListenUDP(network, &net.UDPAddr{IP: net.ParseIP(ip)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, c.LocalAddr().(*net.UDPAddr).Port
	}
	n.decl, n.declPort = tcp("tcp4", "127.0.0.1")
	n.tcp4, n.tcpPort = tcp("tcp4", "127.0.0.1")
	n.tcp6, n.tcp6P = tcp("tcp6", "::1")
	n.udp4, n.udpPort = udp("udp4", "127.0.0.1")
	n.udp6, n.udp6Port = udp("udp6", "::1")
	_ = err
	return n
}

// nothingArrived checks no connection or datagram reached the listeners.
// Loopback connects and sends complete synchronously, so once the session
// has ended anything it sent is already queued; the deadline only bounds
// the check.
func (n *nets) nothingArrived(t *testing.T) {
	t.Helper()
	for _, l := range []*net.TCPListener{n.tcp4, n.tcp6} {
		l.SetDeadline(time.Now().Add(20 * time.Millisecond))
		if c, err := l.Accept(); err == nil {
			c.Close()
			t.Errorf("a connection reached %v", l.Addr())
		}
	}
	for _, c := range []*net.UDPConn{n.udp4, n.udp6} {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		b := make([]byte, 16)
		if k, _, err := c.ReadFrom(b); err == nil {
			t.Errorf("a datagram %q reached %v", b[:k], c.LocalAddr())
		}
	}
}

func rows(t *testing.T, n *nets) []row {
	netIntent := func(*env) []string {
		return []string{fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", n.declPort)}
	}
	netCheck := func(t *testing.T, _ *env, _ *harness.Outcome) { n.nothingArrived(t) }
	dash := harness.Real(t, "/bin/sh")
	python := ""
	if p, err := filepath.EvalSymlinks("/usr/bin/python3"); err == nil {
		python = p
	}
	rs := []row{
		// --- symlinks ---
		{
			name:  "symlink out of scope, read through it",
			why:   "Landlock checks the inode the kernel reached, not the link's name; the observer reports the resolved target",
			steps: steps(op("symlink", secret, at("rw", "l")), op("read", at("rw", "l"))),
			want:  blocked, errno: "EACCES", triple: file("CONSUMES", secret),
		},
		{
			name:  "symlink to a CONSUMES-only file, write through it",
			why:   "the write is checked on ro.txt's inode (read-only); the link's own directory being writable does not matter",
			steps: steps(op("symlink", ro, at("rw", "l")), op("write", at("rw", "l"))),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: unchanged(ro, roContent),
		},
		{
			name: "a link planted at a declared path before the session, write through it",
			why:  "an earlier session (or anyone but root) made <W>/cfg a link to an outside file; MUTATES <W>/cfg must not wall in the target: no rule follows the agent's link, so the write reaches the target's own (absent) rules",
			setup: func(t *testing.T, e *env) {
				if err := os.Symlink(e.O("secret.txt"), e.W("cfg")); err != nil {
					t.Fatal(err)
				}
				if err := os.Lchown(e.W("cfg"), harness.AgentUID, harness.AgentGID); err != nil {
					t.Fatal(err)
				}
			},
			extra: func(e *env) []string { return []string{"MUTATES FILE:" + e.W("cfg")} },
			steps: steps(op("write", at("cfg"))),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", secret),
			check: unchanged(secret, secretContent),
		},
		{
			name:  "directory symlink out of scope, create through it",
			why:   "creation needs MAKE_REG on the real parent (outside), and the observer resolves the parent through the link",
			steps: steps(op("symlink", func(e *env) string { return e.Outside }, at("rw", "d")), op("create", at("rw", "d", "new.txt"))),
			want:  blocked, errno: "EACCES", triple: file("PROVIDES", out("new.txt")),
			check: absent(out("new.txt")),
		},
		{
			name:  "symlink into a PROVIDES-only scope, write an existing file through it",
			why:   "PROVIDES carries WRITE_FILE in Landlock (a Widened residual), so the write lands; the observer names the target, not the link, and strict mode kills",
			steps: steps(op("symlink", precious, at("rw", "l")), op("write", at("rw", "l"))),
			want:  detected, triple: file("MUTATES", precious), declared: "PROVIDES|CONSUMES",
			check: changedTo(precious, harness.Payload, preciousContent),
		},
		{
			name:  "symlink swapped after the write (TOCTOU on the observer's resolution)",
			why:   "the write goes to precious.txt through a link the agent then points at its own mine.txt before the reader resolves the closed fd's path string",
			steps: steps(op("swap-write", at("rw", "l"), precious, mine)),
			want:  detected, triple: file("MUTATES", precious), declared: "PROVIDES|CONSUMES",
			check: changedTo(precious, harness.Payload, preciousContent),
		},
		{
			name:  "chmod through a symlink swapped afterwards",
			why:   "chmod has no kernel wall at all; the observer resolves the absolute link string after the fact, through whatever the link points at by then",
			steps: steps(op("swap-chmod", at("rw", "l"), secret, mine)),
			want:  detected, triple: file("MUTATES", secret),
			check: chmodded(secret),
			kernel: withoutCtimeHooks(row{
				why:          "no ctime tracepoints (< 6.13): nothing names the inode the chmod changed, and the name led through a symlink: strict mode fails closed (or kills for the outside file, when klock resolved the link before the swap); permissive logs what the link points at when read",
				want:         detected,
				strictReason: "klock could not verify which file a",
				triple:       file("MUTATES", secret),
				check:        chmoddedUnattributed(secret),
			}),
		},
		{
			name:  "symlink removed after the write",
			why:   "as above, but the link is unlinked: the name no longer resolves and the observer reports the link's own path",
			steps: steps(op("hide-write", at("rw", "l"), precious)),
			want:  detected, triple: file("MUTATES", precious), declared: "PROVIDES|CONSUMES",
			check: changedTo(precious, harness.Payload, preciousContent),
		},
		{
			name:  "exec an undeclared binary through a symlink in scope",
			why:   "Landlock's EXECUTE is checked on /usr/bin/id's inode; the observer reports the binary, not the link",
			steps: steps(op("symlink", lit("/usr/bin/id"), at("rw", "id")), op("exec", at("rw", "id"))),
			want:  blocked, errno: "EACCES", triple: lit("PROVIDES PROC:/usr/bin/id"),
		},
		// --- hard links ---
		{
			name:  "hard link of a CONSUMES-only file into a writable scope",
			why:   "Landlock's REFER rule: a link may not give the inode rights its source directory does not have (EXDEV); the attempt itself is declared (PROVIDES rw/x, CONSUMES ro.txt) so nothing is logged as a violation, and the write through the missing name fails",
			steps: steps(op("link", ro, at("rw", "ro-link")), op("write", at("rw", "ro-link")), op("link", ro, at("rw", "ro-link"))),
			want:  refusedInScope, errno: "EXDEV",
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				unchanged(ro, roContent)(t, e, o)
				absent(at("rw", "ro-link"))(t, e, o)
			},
			// bpf-lsm: path_link refuses a name that would carry more
			// content rights than the file has with EXDEV, as Landlock
			// does: refused in scope, nothing happened.
			lsm: &row{want: refusedInScope, errno: "EXDEV"},
		},
		{
			name:  "hard link of an outside file into a writable scope",
			why:   "Landlock's REFER rule refuses a link that would give the outside inode out/'s rights (EXDEV, no wall's EACCES: logged as not blocked); the second name is CONSUMES of the outside file, undeclared: a violation, killed in strict mode, in a container as in klock run",
			steps: steps(op("link", secret, at("out", "x"))),
			want:  blocked, errno: "EXDEV", triple: file("CONSUMES", secret),
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				unchanged(secret, secretContent)(t, e, o)
				absent(at("out", "x"))(t, e, o)
			},
		},
		{
			name:  "hard link of a protected file in the same PROVIDES directory, then write through it",
			why:   "no REFER check inside one directory and PROVIDES carries WRITE_FILE, so Landlock lets both through; a link is never a creation (decide/created.go), so the write through the new name is MUTATES on an undeclared path and strict mode kills",
			steps: steps(op("link", precious, at("out", "alias")), op("write", at("out", "alias"))),
			want:  detected, triple: file("MUTATES", at("out", "alias")), declared: "PROVIDES|CONSUMES",
			check: changedTo(precious, harness.Payload, preciousContent),
		},
		// --- /proc/self, dirfd and cwd ---
		{
			name:  "reopen a read-only fd for writing through /proc/self/fd",
			why:   "opening the magic link is a new open of the same file, checked by Landlock on its inode",
			steps: steps(op("reopen-write", ro)),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", ro), declared: "CONSUMES",
			check:     unchanged(ro, roContent),
			gap:       "a failed open has no inode to check, and the observer resolves the agent's /proc/self/fd/N string in its own process instead of /proc/<agent pid>/fd/N: the log names the magic link, not ro.txt (enforcer/observe)",
			gapTriple: lit("MUTATES FILE:/proc/self/fd/"),
		},
		{
			name:  "write through /proc/self/fd/N/NAME of a readable directory",
			why:   "path walk through the magic link lands in the real directory; Landlock checks ro.txt",
			steps: steps(op("procfd-dir-write", func(e *env) string { return e.Workdir }, lit("ro.txt"))),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", ro), declared: "CONSUMES",
			check:     unchanged(ro, roContent),
			gap:       "a failed open has no inode to check, and the observer resolves the agent's /proc/self/fd/N string in its own process instead of /proc/<agent pid>/fd/N: the log names the magic link, not ro.txt (enforcer/observe)",
			gapTriple: lit("MUTATES FILE:/proc/self/fd/"),
		}, {
			name:  "dirfd on the workdir, openat ../outside/secret.txt for writing",
			why:   "openat's open is Landlock-checked on the file reached; the observer resolves the name from the dirfd's inode, dot-dot included",
			steps: steps(op("openat-write", func(e *env) string { return e.Workdir }, lit("../outside/secret.txt"))),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", secret),
			check: unchanged(secret, secretContent),
		},
		{
			name:  "O_PATH open of an outside directory",
			why:   "O_PATH opens are not Landlock operations (they grant no access, but they name the object): it completes; the observer reports it as CONSUMES of the directory and strict mode kills (the openat for writing that follows is refused: EACCES)",
			steps: steps(op("openat-write", func(e *env) string { return e.Outside }, lit("secret.txt"))),
			want:  detected, triple: func(e *env) string { return "CONSUMES FILE:" + e.Outside },
			check: unchanged(secret, secretContent),
			// The probe step reports the openat's refusal, not the O_PATH open.
			errno: "EACCES",
			// bpf-lsm: an O_PATH open reaches no LSM hook (it grants no
			// access); the open for writing through it is refused.
			lsm: &row{want: blocked, errno: "EPERM", triple: file("MUTATES", secret)},
		},
		{
			name:  "chdir outside, write a relative path",
			why:   "chdir is not a Landlock operation, the open is; the observer resolves the relative path from the kernel's cwd inode",
			steps: steps(op("chdir", func(e *env) string { return e.Outside }), lit("write:secret.txt")),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", secret),
			check: unchanged(secret, secretContent),
			gap: "when the probe has exited before the reader resolves its cwd (no process, no cached directory for that inode), " +
				"the path stays relative; decide treats a relative path as a violation (fail closed), so the kill holds but the log says \"secret.txt\" (enforcer/observe)",
			gapTriple: lit("MUTATES FILE:secret.txt"),
		},
		{
			name: "chdir outside, chmod a relative path, chdir back into a writable scope",
			why: "chmod is Unmediated (it lands). By the time user space resolves the relative name the process's cwd is rw/ again, so the name alone says rw/secret.txt, inside the scope; " +
				"the ctime tracepoints caught the inode the kernel changed, and its path from its filesystem's root, placed on the mount that holds it and checked by inode, names outside/secret.txt: detected. " +
				"(Found by this suite as a real escape. The kernel's path was used only when the cwd still matched, so strict mode could only kill for an unverifiable change and permissive mode logged rw/secret.txt; a faster event path made that a race, which is how it showed.)",
			steps: func(e *env) []string {
				return []string{"chdir:" + e.Outside, "chmod:secret.txt", "chdir:" + e.W("rw"), "readn:" + e.W("ro.txt"), "print:done"}
			},
			want:   detected,
			triple: file("MUTATES", secret),
			check:  chmodded(secret),
			// bpf-lsm: path_chmod names the inode the kernel reached; the
			// relative name's base does not matter, and it is refused.
			lsm: &row{
				steps: func(e *env) []string { return []string{"chdir:" + e.Outside, "chmod:secret.txt"} },
				want:  blocked, errno: "EPERM", triple: file("MUTATES", secret),
			},
		},
		{
			name:  "dot-dot out of a writable directory",
			why:   "rw/../ro.txt is ro.txt: Landlock and the observer both work on the resolved path",
			steps: steps(op("write", func(e *env) string { return e.W("rw") + "/../ro.txt" })),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: unchanged(ro, roContent),
		},
		// --- rename, tmpfile, truncate, metadata ---
		{
			name:  "rename a writable file over a CONSUMES-only one",
			why:   "the destination directory (the workdir) has no MAKE_REG/REMOVE_FILE: Landlock refuses the rename (EACCES); the replace (MUTATES ro.txt: rename cannot tell whether it replaced, so fail closed) is the violation",
			steps: steps(op("rename", mine, ro)),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: unchanged(ro, roContent),
		},
		{
			name:  "rename-exchange with a protected file",
			why:   "RENAME_EXCHANGE needs remove and make rights on both sides; out/ has no REMOVE_FILE",
			steps: steps(op("exchange", mine, precious)),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", precious), declared: "PROVIDES|CONSUMES",
			check: unchanged(precious, preciousContent),
		},
		{
			name:  "O_TMPFILE in a writable scope, linkat into an outside directory",
			why:   "the unnamed file is fine; linkat through /proc/self/fd needs MAKE_REG on the outside directory",
			steps: steps(op("tmpfile", at("rw"), out("tmp.txt"))),
			want:  blocked, errno: "EACCES", triple: file("PROVIDES", out("tmp.txt")),
			check: absent(out("tmp.txt")),
		},
		{
			name:  "O_TMPFILE, linkat over into the CONSUMES-only workdir",
			why:   "linking a file into the workdir needs MAKE_REG there: EACCES (checked before REFER's EXDEV)",
			steps: steps(op("tmpfile", at("rw"), at("planted.txt"))),
			want:  blocked, errno: "EACCES", triple: file("PROVIDES", at("planted.txt")), declared: "CONSUMES",
			check: absent(at("planted.txt")),
		},
		{
			name:  "truncate a CONSUMES-only file by path",
			why:   "Landlock ABI >= 3 mediates truncate(2) (TRUNCATE right)",
			steps: steps(op("trunc", ro)),
			want:  blocked, errno: "EACCES", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: unchanged(ro, roContent),
			kernel: landlockBelow(3, row{
				why:  "Landlock ABI < 3 (6.1) has no TRUNCATE right: truncate(2) lands, the observer reports MUTATES, strict mode kills and rolls back",
				want: detected, triple: file("MUTATES", ro), declared: "CONSUMES",
				check: changedTo(ro, "", roContent),
			}),
		},
		{
			name:  "truncate an existing file in a PROVIDES-only scope",
			why:   "PROVIDES carries TRUNCATE (Widened residual): it lands, the observer reports MUTATES and strict mode kills",
			steps: steps(op("trunc", precious)),
			want:  detected, triple: file("MUTATES", precious), declared: "PROVIDES|CONSUMES",
			check: changedTo(precious, "", preciousContent),
		},
		{
			name:  "chmod an outside file",
			why:   "metadata changes are not Landlock operations (Unmediated residual) and DAC lets the owner: detection only",
			steps: steps(op("chmod", secret)),
			want:  detected, triple: file("MUTATES", secret),
			check: chmodded(secret),
		},
		{
			name:  "utimes on a CONSUMES-only file",
			why:   "Unmediated residual, as chmod",
			steps: steps(op("utimes", ro)),
			want:  detected, triple: file("MUTATES", ro), declared: "CONSUMES",
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				st, err := os.Stat(ro(e))
				if err != nil {
					t.Fatal(err)
				}
				// Landlock: the utimes lands (rolled back in strict mode);
				// bpf-lsm's inode_setattr refuses it in both modes.
				if landed := st.ModTime().Unix() == 1; landed != (o.Log.Mode != policy.ModeStrict && !harness.LSM()) {
					t.Errorf("ro.txt mtime %v in %s mode: want the utimes landed in permissive mode and rolled back in strict mode (refused on bpf-lsm)", st.ModTime(), o.Log.Mode)
				}
			},
		},
		{
			name:  "setxattr on an outside file",
			why:   "Unmediated residual, as chmod; the rollback removes the xattr (the backup recorded the metadata of the agent's files in /tmp)",
			steps: steps(op("setxattr", secret)),
			want:  detected, triple: file("MUTATES", secret),
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				_, err := unix.Getxattr(secret(e), "user.klock", nil)
				if landed := err == nil; landed != (o.Log.Mode != policy.ModeStrict && !harness.LSM()) {
					t.Errorf("user.klock on secret.txt in %s mode: present=%v, want it landed in permissive mode and rolled back in strict mode (refused on bpf-lsm)", o.Log.Mode, landed)
				}
				if o.Log.Mode == policy.ModeStrict {
					e.AssertRestored(o, nil)
				}
			},
		},
		// --- exec tricks ---
		{
			name:  "exec a file the agent wrote",
			why:   "EXECUTE comes from PROC intents only; a writable scope is never executable",
			steps: steps(op("create", at("rw", "x")), op("chmod", at("rw", "x")), op("exec", at("rw", "x"))),
			want:  blocked, errno: "EACCES", triple: func(e *env) string { return "PROVIDES PROC:" + e.W("rw", "x") },
		},
		{
			name:  "memfd_create(MFD_EXEC)",
			why:   "vm.memfd_noexec=2 in the session's pid namespace refuses executable memfds at creation; memfd_create is not an observed syscall",
			steps: steps(lit("memfd-exec")),
			want:  refusedUnlogged, errno: "EACCES",
			// bpf-lsm sets no memfd_noexec (it walls no Landlock): the
			// memfd is made, and its exec is refused as the plain one's.
			lsm: &row{want: blocked, errno: "EPERM", triple: lit("CONSUMES FILE:" + lsm.Unnamed)},
			kernel: withoutMemfdNoexec(false, row{
				why:  "a kernel before 6.3 has no MFD_EXEC: the unknown flag is refused (EINVAL)",
				want: refusedUnlogged, errno: "EINVAL",
			}),
		},
		{
			name:  "plain memfd, exec through /proc/self/fd",
			why:   "a memfd made under memfd_noexec=2 is sealed non-executable: execve fails with EACCES; the observer reports the failed exec of /proc/self/fd/N (a memfd has no path) as an undeclared PROC, so strict mode kills",
			steps: steps(lit("memfd-plain-exec")),
			want:  blocked, errno: "EACCES", triple: lit("PROVIDES PROC:/proc/self/fd/"), prefix: true,
			// bpf-lsm: the kernel's open of the memfd for exec names no
			// reachable path: refused (fail closed) before the exec.
			lsm: &row{want: blocked, errno: "EPERM", triple: lit("CONSUMES FILE:" + lsm.Unnamed)},
			kernel: withoutMemfdNoexec(true, row{
				why:  "a kernel before 6.3 has no vm.memfd_noexec, and Landlock does not mediate files of internal mounts: the exec runs; the observer reports the memfd's kernel name as an undeclared PROC and strict mode kills",
				want: detected, triple: lit("PROVIDES PROC:/memfd:klock-probe"),
			}),
		},
		{
			name:  "ld.so running an undeclared binary",
			why:   "the ELF interpreter has EXECUTE so declared binaries can start (a Widened residual); running it directly is an exec of an undeclared PROC, detected and killed",
			steps: steps(op("ldso", lit("/usr/bin/true"))),
			want:  detected, triple: func(e *env) string { return "PROVIDES PROC:" + harness.Real(t, "/lib64/ld-linux-x86-64.so.2") },
		},
		// --- interpreters ---
		{
			name:  "sh -c writing outside",
			why:   "an interpreter is a process like any other: Landlock refuses its open",
			extra: func(*env) []string { return []string{"PROVIDES PROC:" + dash} },
			cmd: func(e *env) []string {
				return []string{"/bin/sh", "-c", `if echo x > "$O/sh.txt"; then echo attack=ok; else echo attack=EACCES; fi`}
			},
			want: blocked, errno: "EACCES", triple: file("PROVIDES", out("sh.txt")),
			check: absent(out("sh.txt")),
			// The script labels any refusal EACCES.
			lsm: &row{want: blocked, errno: "EACCES", triple: file("PROVIDES", out("sh.txt")), check: absent(out("sh.txt"))},
		},
		// --- network (a NET intent is declared: the agent's own namespace, joined to the host by netwall) ---
		{
			name:  "TCP to an undeclared port on ::1",
			why:   "Landlock's CONNECT_TCP port rules apply to IPv6 too (EACCES before cgroup-net's connect6; EPERM from cgroup-net where Landlock has no TCP rights)",
			extra: netIntent,
			steps: func(e *env) []string { return []string{fmt.Sprintf("tcp:[::1]:%d", n.tcp6P)} },
			want:  blocked, errno: harness.NetRefusal(), triple: func(*env) string { return fmt.Sprintf("CONSUMES NET:[::1]:%d/tcp", n.tcp6P) },
			check: netCheck,
		},
		{
			name:  "TCP to the undeclared port through a v4-mapped IPv6 address",
			why:   "::ffff:127.0.0.1 is judged as 127.0.0.1 (netguard, and the log unmaps it); the port is not declared",
			extra: netIntent,
			steps: func(e *env) []string { return []string{fmt.Sprintf("tcp:[::ffff:127.0.0.1]:%d", n.tcpPort)} },
			want:  blocked, errno: harness.NetRefusal(), triple: func(*env) string { return fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", n.tcpPort) },
			check: netCheck,
		},
		{
			name: "TCP to the undeclared port while signals keep interrupting the connect",
			why: "a signal (SA_RESTART) takes the thread out of the trapped connect before its answer: the tracepoints see exits with the kernel's restart code, " +
				"which are not the call's answer; the restarted call's refusal is",
			extra: netIntent,
			steps: func(e *env) []string { return []string{fmt.Sprintf("tcp-signalled:127.0.0.1:%d", n.tcpPort)} },
			want:  blocked, errno: harness.NetRefusal(), triple: func(*env) string { return fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", n.tcpPort) },
			check: netCheck,
		},
		{
			name:  "UDP to an undeclared port on ::1",
			why:   "Landlock has no UDP rules; cgroup/sendmsg6 refuses it (EPERM) and reports it",
			extra: netIntent,
			steps: func(e *env) []string { return []string{fmt.Sprintf("udp:[::1]:%d", n.udp6Port)} },
			want:  blocked, errno: "EPERM", triple: func(*env) string { return fmt.Sprintf("CONSUMES NET:[::1]:%d/udp", n.udp6Port) },
			check: netCheck,
		},
		{
			name:  "UDP through a v4-mapped address",
			why:   "sendmsg6 judges ::ffff:127.0.0.1 by the IPv4 rules: no UDP is declared",
			extra: netIntent,
			steps: func(e *env) []string { return []string{fmt.Sprintf("udp:[::ffff:127.0.0.1]:%d", n.udpPort)} },
			want:  blocked, errno: "EPERM", triple: func(*env) string { return fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/udp", n.udpPort) },
			check: netCheck,
		},
		{
			name:  "raw IPv6 socket",
			why:   "no CAP_NET_RAW: inet6_create refuses before any hook; the observer reports the raw socket attempt",
			extra: netIntent,
			steps: steps(lit("raw6")),
			want:  blocked, errno: "EPERM", triple: lit("CONSUMES NET:raw"),
		}, pingRow(t, netIntent),
		{
			name:  "io_uring_setup",
			why:   "the seccomp filter denies io_uring_* (operations through a ring bypass syscall tracepoints); refused, so nothing went unobserved and the session goes on",
			steps: steps(lit("iouring")),
			want:  refusedUnlogged, errno: "EPERM",
		},
		// --- IPC ---
		{
			name: "connect to a host abstract unix socket (agent with a NET intent)",
			why: "a session with NET intents has its own network namespace too (joined to the host by netwall): the host's abstract names do not exist for the agent (ECONNREFUSED); " +
				"the attempt is still an undeclared NET:@name and strict mode kills (Landlock ABI >= 6 would also refuse a listener outside its domain: EPERM)",
			extra: netIntent,
			setup: abstractListener,
			steps: func(e *env) []string { return []string{"unix:@" + e.ID} },
			want:  blocked, errno: "ECONNREFUSED", triple: func(e *env) string { return "CONSUMES NET:@" + e.ID + ":0" },
			lsm: &row{want: blocked, errno: "EPERM", triple: func(e *env) string { return "CONSUMES NET:@" + e.ID + ":0" }},
		},
		{
			name:  "connect to a host abstract unix socket (agent in its own network namespace)",
			why:   "abstract names are per network namespace: the host's listener does not exist for the agent (ECONNREFUSED, not counted as blocked); the attempt is still an undeclared NET:@name and strict mode kills",
			setup: abstractListener,
			steps: func(e *env) []string { return []string{"unix:@" + e.ID} },
			want:  blocked, errno: "ECONNREFUSED", triple: func(e *env) string { return "CONSUMES NET:@" + e.ID + ":0" },
			// bpf-lsm's socket_connect refuses every abstract name first.
			lsm: &row{want: blocked, errno: "EPERM", triple: func(e *env) string { return "CONSUMES NET:@" + e.ID + ":0" }},
		},
		// --- devices, klock's state, cgroups ---
		{
			name:  "write to /dev/zero (baseline CONSUMES only)",
			why:   "the baseline grants only reads on /dev/zero; Landlock refuses WRITE_FILE",
			steps: steps(op("writedev", lit("/dev/zero"))),
			want:  blocked, errno: "EACCES", triple: lit("MUTATES FILE:/dev/zero"), declared: "CONSUMES",
		},
		{
			name:  "create in /dev/shm",
			why:   "no rule covers /dev/shm: no MAKE_REG",
			steps: func(e *env) []string { return []string{"create:/dev/shm/" + e.ID} },
			want:  blocked, errno: "EACCES", triple: func(e *env) string { return "PROVIDES FILE:/dev/shm/" + e.ID },
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				if e.Exists("/dev/shm/" + e.ID) {
					os.Remove("/dev/shm/" + e.ID)
					t.Error("/dev/shm file created")
				}
			},
		},
		{
			name: "tamper with klock's state under <workdir>/.klock",
			why:  "the manifest allows everything under the workdir, but <workdir>/.klock is masked by an empty, read-only, mode-000 tmpfs: Landlock would allow both steps, the mask refuses them (EACCES: the agent cannot even traverse it); nothing left the declared scope, so no kill",
			extra: func(e *env) []string {
				return []string{"PROVIDES FILE:" + e.Workdir + "/**", "MUTATES FILE:" + e.Workdir + "/**"}
			},
			setup: func(t *testing.T, e *env) {
				p := e.W(".klock", "sessions", "earlier", "verification.json")
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			steps: steps(op("write", at(".klock", "sessions", "earlier", "verification.json")), op("create", at(".klock", "evil"))),
			want:  refusedInScope, errno: "EACCES",
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				if got := o.Probe["write:"+e.W(".klock", "sessions", "earlier", "verification.json")]; got != "EACCES" {
					t.Errorf("the agent reached klock's state: write of an earlier log = %s, want EACCES (masked)", got)
				}
				unchanged(at(".klock", "sessions", "earlier", "verification.json"), "{}")(t, e, o)
				absent(at(".klock", "evil"))(t, e, o)
			},
		},
		{
			name: "make a sub-cgroup of the session cgroup",
			why:  "a nested cgroup would have another id and escape the observer's filter: the cgroup directory is root's and outside every rule (DAC and Landlock: EACCES)",
			steps: func(e *env) []string {
				mp, err := cgroup.Mountpoint()
				if err != nil {
					t.Fatal(err)
				}
				return []string{"mkdir:" + filepath.Join(mp, cgroup.Parent, e.ID, "escape")}
			},
			want: blocked, errno: "EACCES",
			triple: func(e *env) string {
				mp, _ := cgroup.Mountpoint()
				return "PROVIDES FILE:" + filepath.Join(mp, cgroup.Parent, e.ID, "escape")
			},
			declared: "?",
		},
	}
	rs = append(rs, unixRows(t)...)
	rs = append(rs, metaIoctlRows(t)...)
	rs = append(rs, execMapRows(t)...)
	rs = append(rs, aliasRows()...)
	if python != "" {
		rs = append(rs, row{
			name:  "python -c writing outside",
			why:   "as sh -c: Landlock refuses the interpreter's open",
			extra: func(*env) []string { return []string{"PROVIDES PROC:" + python} },
			cmd: func(e *env) []string {
				return []string{"/usr/bin/python3", "-S", "-c", `import errno, os, sys
try:
    open(os.environ["O"] + "/py.txt", "w")
    print("attack=ok")
except OSError as e:
    print("attack=" + errno.errorcode[e.errno])`}
			},
			want: blocked, errno: "EACCES", triple: file("PROVIDES", out("py.txt")),
			check: absent(out("py.txt")),
		})
	}
	return rs
}

func abstractListener(t *testing.T, e *env) {
	l, err := net.Listen("unix", "@"+e.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// pingRow: an ICMP "ping" socket (SOCK_DGRAM, IPPROTO_ICMP) needs no
// capability. inet_create runs the protocol's init (ping_init_sock, which
// checks net.ipv4.ping_group_range) before the cgroup sock_create hook, so
// the outcome depends on that sysctl: closed (this host's default "1 0"):
// EACCES from ping_init_sock, which the observer does not report (it
// reports SOCK_RAW and packet sockets only), so no violation and no kill;
// open: netguard's sock_create refuses it (EPERM) and reports NET:raw.
func pingRow(t *testing.T, netIntent func(*env) []string) row {
	r := row{name: "ICMP ping socket", extra: netIntent, steps: steps(lit("ping"))}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ping_group_range")
	if err != nil {
		t.Fatal(err)
	}
	var lo, hi int64
	fmt.Sscan(string(b), &lo, &hi)
	if lo > hi || lo > harness.AgentGID || hi < harness.AgentGID {
		r.why = fmt.Sprintf("ping_group_range %q excludes the agent's group: ping_init_sock refuses (EACCES) before any klock hook; not a socket the observer reports", strings.TrimSpace(string(b)))
		r.want, r.errno = refusedUnlogged, "EACCES"
		return r
	}
	r.why = "ping_group_range admits the agent: netguard's sock_create refuses a non-TCP/UDP inet socket unless NET:raw is declared"
	r.want, r.errno, r.triple = blocked, "EPERM", lit("CONSUMES NET:raw")
	return r
}

func TestEscapes(t *testing.T) {
	n := listen(t)
	all := rows(t, n)
	if len(all) < 25 {
		t.Fatalf("%d escape attempts, want at least 25", len(all))
	}
	for _, r := range all {
		t.Run(r.name, func(t *testing.T) {
			// A row may be an escape on one backend only (its lsm row
			// says the other's outcome).
			here := hereRow(r)
			if here.escape != "" && os.Getenv(KnownEscapesEnv) == "" {
				t.Skipf("KNOWN ESCAPE (set %s=1 to run): %s", KnownEscapesEnv, here.escape)
			}
			t.Logf("expect %s: %s", here.want, here.why)
			for _, m := range []policy.Mode{policy.ModePermissive, policy.ModeStrict} {
				t.Run(string(m), func(t *testing.T) { attempt(t, r, m, (*env).Run) })
			}
		})
	}
}

// attempt runs one row in one mode. Permissive mode runs the whole step
// list (the walls are the same, nothing is killed), so it pins the exact
// errno; strict mode pins the kill (the probe's own report may be cut short
// by it: it is checked only when it made it out).
func attempt(t *testing.T, r row, m policy.Mode, run func(*env, harness.Spec) *harness.Outcome) {
	e := newEnv(t)
	r = hereRow(r)
	if r.setup != nil {
		r.setup(t, e)
	}
	intents := e.intents()
	if r.intents != nil {
		intents = append(r.intents(e), harness.ProbeIntents()...)
	}
	if r.extra != nil {
		intents = append(intents, r.extra(e)...)
	}
	var cmd []string
	attackKey := "attack"
	if r.cmd != nil {
		cmd = r.cmd(e)
	} else {
		st := r.steps(e)
		cmd = append([]string{harness.Probe}, st...)
		attackKey = st[len(st)-1]
	}
	o := run(e, harness.Spec{Mode: m, ID: e.ID, Intents: intents, Command: cmd,
		Env: []string{"W=" + e.Workdir, "O=" + e.Outside}})

	wantResult := r.errno
	if (r.want == detected || r.want == allowed) && r.errno == "" {
		wantResult = "ok"
	}
	got, reported := o.Probe[attackKey]
	if m == policy.ModePermissive && !reported {
		t.Fatalf("no result for the attack step %q\n%s", attackKey, o.Dump())
	}
	if reported && got != wantResult {
		t.Errorf("attack %q = %s, want %s\n%s", attackKey, got, wantResult, o.Dump())
	}

	switch {
	case r.strictReason != "":
		// The reason, or (a row that names its triple) the violation
		// itself when klock resolved the name before the agent changed
		// it again: either kill is the secure outcome.
		violated := r.triple != nil && o.Violation(r.triple(e)) != nil
		if m == policy.ModeStrict && (!o.Res.Killed || !strings.HasPrefix(o.Res.Reason, r.strictReason) && !violated) {
			t.Errorf("strict: killed=%v reason %q, want a kill for %q\n%s", o.Res.Killed, o.Res.Reason, r.strictReason, o.Dump())
		}
		if m == policy.ModePermissive && o.Res.Killed {
			t.Errorf("permissive session killed: %s", o.Res.Reason)
		}
	case r.want == blocked || r.want == detected:
		triple := r.triple(e)
		if r.prefix {
			triple = findPrefix(o, triple)
		}
		if r.gap != "" && o.Violation(triple) == nil && os.Getenv(KnownEscapesEnv) == "" {
			if g := findPrefix(o, r.gapTriple(e)); o.Violation(g) != nil {
				t.Logf("KNOWN LOGGING GAP (set %s=1 to demand the resolved path): %s; logged %s instead of %s", KnownEscapesEnv, r.gap, g, triple)
				triple = g
			}
		}
		// A sendmmsg cut short: the kernel refused a message after one
		// went, and reports the count, not the errno.
		logBlocked := r.want == blocked && (r.errno == "EACCES" || r.errno == "EPERM" || r.errno == cutShort)
		if m == policy.ModePermissive {
			if o.Res.Killed {
				t.Errorf("permissive session killed: %s", o.Res.Reason)
			}
			o.AssertViolation(t, triple, violationPath(triple), logBlocked)
		} else {
			decl := r.declared
			if decl == "?" {
				decl = o.Declared(t, fileTriple(triple))
			}
			msg := message(triple, decl)
			if r.via != nil {
				msg = messageVia(triple, decl, r.via(e))
			}
			o.AssertKilledFor(t, triple, violationPath(triple), msg, logBlocked)
		}
	case r.want == refusedInScope || r.want == refusedUnlogged || r.want == allowed:
		o.AssertClean(t, 0)
	}
	if r.check != nil {
		r.check(t, e, o)
	}
}

// violationPath is the log's Path for a triple string: the path of a FILE
// or PROC object, the object itself for NET.
func violationPath(triple string) string {
	_, obj, _ := strings.Cut(triple, " ")
	if p, ok := strings.CutPrefix(obj, "FILE:"); ok {
		return p
	}
	if p, ok := strings.CutPrefix(obj, "PROC:"); ok {
		return p
	}
	return obj
}

func message(triple, declared string) string {
	pred, _, _ := strings.Cut(triple, " ")
	if declared == "" {
		return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but declared nothing there", pred, violationPath(triple))
	}
	return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but only declared %s", pred, violationPath(triple), declared)
}

// messageVia is message for a file reached through another name.
func messageVia(triple, declared, via string) string {
	pred, _, _ := strings.Cut(triple, " ")
	obj := violationPath(triple) + " (" + via + ")"
	if declared == "" {
		return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but declared nothing there", pred, obj)
	}
	return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but only declared %s", pred, obj, declared)
}

// findPrefix returns the first logged violation triple starting with
// prefix (prefix itself when none does, so the assertion names it).
func findPrefix(o *harness.Outcome, prefix string) string {
	for _, v := range o.Log.Violations {
		if strings.HasPrefix(v.Triple, prefix) {
			return v.Triple
		}
	}
	return prefix
}

func fileTriple(triple string) policy.Triple {
	pred, obj, _ := strings.Cut(triple, " ")
	p, _ := policy.ParsePredicate(pred)
	return policy.FileTriple(p, strings.TrimPrefix(obj, "FILE:"))
}
