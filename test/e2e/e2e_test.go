//go:build linux

// Package e2e runs real klock sessions end to end:
// session.Run in-process with a real manifest, real processes as uid
// 65534, the Landlock + tracepoints + cgroup-net backends of this host, and
// assertions on the session result, the verification log on disk and the
// file system afterwards.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

func dash(t *testing.T) string { return harness.Real(t, "/bin/sh") }

func msg(pred, obj, declared string) string {
	obj = strings.TrimPrefix(strings.TrimPrefix(obj, "FILE:"), "PROC:")
	if declared == "" {
		return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but declared nothing there", pred, obj)
	}
	return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but only declared %s", pred, obj, declared)
}

// tcpListener listens on a fresh loopback port and reports, after the
// session, whether any connection reached it.
type tcpListener struct {
	ln   *net.TCPListener
	port int
}

func listenTCP(t *testing.T) *tcpListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &tcpListener{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
}

// accepted reports whether a connection is waiting in the accept queue. The
// kernel completes the handshake before connect returns, so once the
// session has ended any connection it made is already queued: the deadline
// only bounds the check, it does not synchronize anything.
func (l *tcpListener) accepted() bool {
	l.ln.SetDeadline(time.Now().Add(50 * time.Millisecond))
	c, err := l.ln.Accept()
	if err != nil {
		return false
	}
	c.Close()
	return true
}

type udpListener struct {
	c    *net.UDPConn
	port int
}

func listenUDP(t *testing.T) *udpListener {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpListener{c: c, port: c.LocalAddr().(*net.UDPAddr).Port}
}

// received reports whether a datagram is queued (loopback delivery is
// synchronous with sendto).
func (u *udpListener) received() string {
	u.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	b := make([]byte, 64)
	n, _, err := u.c.ReadFrom(b)
	if err != nil {
		return ""
	}
	return string(b[:n])
}

// TestBlockedAndLogged: each undeclared operation is refused by the kernel
// (Landlock or cgroup-net), the strict session is killed with the exact
// ScopeViolationError, the verification log holds the violation with the
// resolved absolute path as blocked, and nothing changed on disk or the wire.
func TestBlockedAndLogged(t *testing.T) {
	tcpOK, tcpDenied := listenTCP(t), listenTCP(t)
	udpDenied := listenUDP(t)
	netOK := fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", tcpOK.port)
	tcpObj := fmt.Sprintf("NET:127.0.0.1:%d/tcp", tcpDenied.port)
	udpObj := fmt.Sprintf("NET:127.0.0.1:%d/udp", udpDenied.port)

	type row struct {
		name string
		// step is the probe step; pred, obj and declared form the expected
		// violation; check inspects the world afterwards.
		step            func(w *harness.World) string
		pred, declared  string
		obj             func(w *harness.World) string
		network         bool
		check           func(t *testing.T, w *harness.World)
		wantProbeResult string
	}
	rows := []row{
		{
			name: "read of an undeclared file",
			step: func(w *harness.World) string { return "read:" + w.O("secret.txt") },
			pred: "CONSUMES", obj: func(w *harness.World) string { return "FILE:" + w.O("secret.txt") },
			wantProbeResult: "EACCES",
		},
		{
			name: "write to a CONSUMES-only file",
			step: func(w *harness.World) string { return "write:" + w.W("data.txt") },
			pred: "MUTATES", declared: "CONSUMES", obj: func(w *harness.World) string { return "FILE:" + w.W("data.txt") },
			check: func(t *testing.T, w *harness.World) {
				if got := w.Content(w.W("data.txt")); got != "data\n" {
					t.Errorf("data.txt = %q, want unchanged", got)
				}
			},
			wantProbeResult: "EACCES",
		},
		{
			name: "create outside the PROVIDES scope",
			step: func(w *harness.World) string { return "create:" + w.W("new.txt") },
			pred: "PROVIDES", declared: "CONSUMES", obj: func(w *harness.World) string { return "FILE:" + w.W("new.txt") },
			check: func(t *testing.T, w *harness.World) {
				if w.Exists(w.W("new.txt")) {
					t.Error("new.txt was created")
				}
			},
			wantProbeResult: "EACCES",
		},
		{
			name: "unlink outside DELETES",
			step: func(w *harness.World) string { return "unlink:" + w.W("keep.txt") },
			pred: "DELETES", declared: "CONSUMES", obj: func(w *harness.World) string { return "FILE:" + w.W("keep.txt") },
			check: func(t *testing.T, w *harness.World) {
				if got := w.Content(w.W("keep.txt")); got != "keep\n" {
					t.Errorf("keep.txt = %q, want it kept", got)
				}
			},
			wantProbeResult: "EACCES",
		},
		{
			name: "exec of an undeclared binary",
			step: func(w *harness.World) string { return "exec:/usr/bin/id" },
			// PROC and FILE are different objects: the baseline's
			// CONSUMES FILE:/usr/** declares nothing about running it.
			pred: "PROVIDES", obj: func(w *harness.World) string { return "PROC:/usr/bin/id" },
			wantProbeResult: "EACCES",
		},
		{
			name: "TCP connect to an undeclared loopback port",
			step: func(w *harness.World) string { return fmt.Sprintf("tcp:127.0.0.1:%d", tcpDenied.port) },
			pred: "CONSUMES", obj: func(w *harness.World) string { return tcpObj },
			network: true,
			check: func(t *testing.T, w *harness.World) {
				if tcpDenied.accepted() {
					t.Error("the undeclared port accepted a connection")
				}
			},
			// Landlock's CONNECT_TCP port rules refuse it first (EACCES,
			// ABI 4+); cgroup-net answers EPERM where they are absent
			// (6.1's ABI 2) and under bpf-lsm.
			wantProbeResult: harness.NetRefusal(),
		},
		{
			name: "UDP sendto an undeclared loopback port",
			step: func(w *harness.World) string { return fmt.Sprintf("udp:127.0.0.1:%d", udpDenied.port) },
			pred: "CONSUMES", obj: func(w *harness.World) string { return udpObj },
			network: true,
			check: func(t *testing.T, w *harness.World) {
				if got := udpDenied.received(); got != "" {
					t.Errorf("the undeclared port received %q", got)
				}
			},
			wantProbeResult: "EPERM", // cgroup/sendmsg4 (Landlock has no UDP rules)
		},
		{
			name: "raw socket",
			step: func(w *harness.World) string { return "raw4" },
			pred: "CONSUMES", obj: func(w *harness.World) string { return "NET:raw" },
			network:         true,
			wantProbeResult: "EPERM", // no CAP_NET_RAW (cgroup sock_create would say EPERM too)
		},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			w := harness.NewWorld(t)
			w.File(w.W("data.txt"), "data\n")
			w.File(w.W("keep.txt"), "keep\n")
			w.Dir(w.W("out"))
			w.File(w.O("secret.txt"), "secret\n")
			// out/* and not out/**: out itself may not be removed, so its
			// rule stays on it and the wall is exact (a directory the
			// agent may remove and make again cannot keep a rule of its
			// own: TestReplaceableDirectoryIsDetected).
			intents := append([]string{
				"CONSUMES FILE:" + w.Workdir + "/**",
				"PROVIDES FILE:" + w.W("out") + "/**",
				"DELETES FILE:" + w.W("out") + "/*",
			}, harness.ProbeIntents()...)
			if r.network {
				intents = append(intents, netOK)
			}
			step := r.step(w)
			o := w.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, step}})
			obj := r.obj(w)
			path := strings.TrimPrefix(strings.TrimPrefix(obj, "FILE:"), "PROC:")
			o.AssertKilledFor(t, r.pred+" "+obj, path, msg(r.pred, obj, r.declared), true)
			// The kill races the probe's report; when the report made it
			// out, it must be the kernel's refusal.
			want := r.wantProbeResult
			if want == "EACCES" {
				want = harness.Refusal() // the file wall's answer (bpf-lsm: EPERM)
			}
			if got, ok := o.Probe[step]; ok && got != want {
				t.Errorf("probe %s = %s, want %s", step, got, want)
			}
			if r.check != nil {
				r.check(t, w)
			}
			w.AssertRestored(o, nil)
		})
	}
}

// TestDeclaredOperationsSucceed: a session that does only declared things
// ends CLEAN with exit 0, every effect happened, use counts are exact and
// the declared-but-unused intent is reported as under-utilization.
func TestDeclaredOperationsSucceed(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("in.txt"), "input\n")
	w.File(w.W("edit.txt"), "v1\n")
	w.File(w.W("old.txt"), "old\n")
	w.Dir(w.W("out"))
	tcpOK := listenTCP(t)
	udpOK := listenUDP(t)
	in := map[string]string{
		"read":   "CONSUMES FILE:" + w.W("in.txt"),
		"edit":   "MUTATES FILE:" + w.W("edit.txt"),
		"create": "PROVIDES FILE:" + w.W("out") + "/**",
		"delete": "DELETES FILE:" + w.W("old.txt"),
		"tcp":    fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", tcpOK.port),
		"udp":    fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/udp", udpOK.port),
		"exec":   "PROVIDES PROC:/usr/bin/true",
		"probe":  "PROVIDES PROC:" + harness.Probe,
		"unused": "CONSUMES FILE:" + w.W("unused.txt"),
	}
	var intents []string
	for _, k := range []string{"read", "edit", "create", "delete", "tcp", "udp", "exec", "probe", "unused"} {
		intents = append(intents, in[k])
	}
	steps := []string{
		"read:" + w.W("in.txt"),
		"append:" + w.W("edit.txt"),
		"create:" + w.W("out", "new.txt"),
		"unlink:" + w.W("old.txt"),
		fmt.Sprintf("tcp:127.0.0.1:%d", tcpOK.port),
		fmt.Sprintf("udp:127.0.0.1:%d", udpOK.port),
		"exec:/usr/bin/true",
	}
	o := w.Run(harness.Spec{Intents: intents, Command: append([]string{harness.Probe}, steps...)})
	o.AssertClean(t, 0)
	for _, s := range steps {
		if o.Probe[s] != "ok" {
			t.Errorf("probe %s = %q, want ok\n%s", s, o.Probe[s], o.Dump())
		}
	}
	if got := w.Content(w.W("edit.txt")); got != "v1\n"+harness.Payload {
		t.Errorf("edit.txt = %q", got)
	}
	if got := w.Content(w.W("out", "new.txt")); got != harness.Payload {
		t.Errorf("out/new.txt = %q", got)
	}
	if w.Exists(w.W("old.txt")) {
		t.Error("old.txt still exists")
	}
	if !tcpOK.accepted() {
		t.Error("the declared TCP port saw no connection")
	}
	// Handed a host socket under either wall, and counted below as one
	// use all the same.
	if c, ok := peerCounts(o.Log, strings.TrimPrefix(in["tcp"], "CONSUMES ")); !ok || c.Via != handOffVia() {
		t.Errorf("the log's counters for %s: %+v, want them via %s", in["tcp"], c, handOffVia())
	}
	if got := udpOK.received(); got != harness.Payload {
		t.Errorf("the declared UDP port received %q", got)
	}
	// Exact use counts: one open each, one connect, one sendto; an exec
	// counts twice (PROVIDES PROC, and the CONSUMES of the binary the same
	// PROC intent covers). The probe's own exec is the agent's start, and
	// the Go runtime then opens its own binary once more.
	for k, want := range map[string]uint64{"read": 1, "edit": 1, "create": 1, "delete": 1, "tcp": 1, "udp": 1, "exec": 2, "probe": 3, "unused": 0} {
		got, ok := o.Use(in[k])
		if !ok || got != want {
			t.Errorf("uses of %s = %d (listed %v), want %d", in[k], got, ok, want)
		}
	}
	if !slices.Equal(o.Log.Unused, []string{in["unused"]}) {
		t.Errorf("under-utilization = %q, want [%s]", o.Log.Unused, in["unused"])
	}
	if !slices.Contains(o.Log.Created, w.W("out", "new.txt")) {
		t.Errorf("created = %q, want out/new.txt listed", o.Log.Created)
	}
	if o.Log.Exit.Code == nil || *o.Log.Exit.Code != 0 || o.Log.Exit.KilledByKlock {
		t.Errorf("log exit = %+v, want code 0", o.Log.Exit)
	}
}

// TestChildrenStayEnforced: a forked child, a double-forked setsid
// grandchild and a pipeline member are all inside the session: their
// violations are refused and kill the session.
func TestChildrenStayEnforced(t *testing.T) {
	for _, c := range []struct {
		name, script string
		procs        []string
		pred         string
		target       string // under Outside
		declared     string
		comm         string
	}{
		{
			name: "fork", script: `( echo x > "$O/forked.txt" ); exit 0`,
			pred: "PROVIDES", target: "forked.txt", comm: "sh",
		},
		{
			// The grandchild is in its own session, reparented to the
			// agent; the agent waits on a fifo it writes after its attempt.
			// /bin/sh is named absolutely: setsid's execvp would first try
			// /usr/local/bin/sh, and a failed exec of an undeclared path is
			// itself a violation in strict mode.
			name:   "double fork and setsid",
			script: `mkfifo "$W/out/fifo" && ( setsid /bin/sh -c 'cat "$O/secret.txt"; echo done > "$W/out/fifo"' & ) ; read x < "$W/out/fifo"; exit 0`,
			procs:  []string{"/usr/bin/setsid", "/usr/bin/cat", "/usr/bin/mkfifo"},
			pred:   "CONSUMES", target: "secret.txt", comm: "cat",
		},
		{
			name: "shell pipeline", script: `cat "$W/data.txt" | tee "$O/copy.txt" > /dev/null; exit 0`,
			procs: []string{"/usr/bin/cat", "/usr/bin/tee"},
			pred:  "PROVIDES", target: "copy.txt", comm: "tee",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := harness.NewWorld(t)
			w.File(w.W("data.txt"), "data\n")
			w.Dir(w.W("out"))
			w.File(w.O("secret.txt"), "secret\n")
			intents := []string{
				"CONSUMES FILE:" + w.Workdir + "/**",
				"PROVIDES FILE:" + w.W("out") + "/**",
				"PROVIDES PROC:" + dash(t),
			}
			for _, p := range c.procs {
				intents = append(intents, "PROVIDES PROC:"+p)
			}
			o := w.Run(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c", c.script},
				Env: []string{"W=" + w.Workdir, "O=" + w.Outside}})
			target := w.O(c.target)
			obj := "FILE:" + target
			o.AssertKilledFor(t, c.pred+" "+obj, target, msg(c.pred, obj, c.declared), true)
			if v := o.Violation(c.pred + " " + obj); v != nil && v.Comm != c.comm {
				t.Errorf("violation by %q, want %q (the child)", v.Comm, c.comm)
			}
			if c.target != "secret.txt" && w.Exists(target) {
				t.Errorf("%s was created", target)
			}
		})
	}
}

// TestAgentCannotLeaveItsCgroupLoadBPFOrPtrace: klockd's socket refuses
// the agent (see the subtest); moving itself to the
// parent cgroup is refused (Landlock and DAC: EACCES) and, being a file
// write outside the scope, kills the session; bpf() and ptrace() are
// refused by the seccomp filter (EPERM). The tracepoint backend does not
// cover bpf and ptrace (they are not in its syscall list), so those two
// attempts leave no violation and do not kill: the wall is seccomp's.
func TestAgentCannotLeaveItsCgroupLoadBPFOrPtrace(t *testing.T) {
	mp, err := cgroup.Mountpoint()
	if err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(mp, "cgroup.procs")

	t.Run("bpf and ptrace", func(t *testing.T) {
		w := harness.NewWorld(t)
		steps := []string{"bpf", "ptrace:1", "cgroup"}
		o := w.Run(harness.Spec{Intents: harness.ProbeIntents(), Command: append([]string{harness.Probe}, steps...)})
		o.AssertClean(t, 0)
		if o.Probe["bpf"] != "EPERM" || o.Probe["ptrace:1"] != "EPERM" {
			t.Errorf("bpf=%s ptrace=%s, want EPERM from seccomp\n%s", o.Probe["bpf"], o.Probe["ptrace:1"], o.Dump())
		}
		if o.Probe["cgroup-line"] != "0::/" {
			t.Errorf("agent cgroup = %q, want the root of its cgroup namespace (the session group)", o.Probe["cgroup-line"])
		}
	})

	t.Run("reach klockd", func(t *testing.T) {
		// A real klockd on a socket in a directory the agent can traverse
		// (the default /run/klock is 0750 besides). Its socket is 0660,
		// root and the klock group: connecting needs write permission on
		// it, which uid 65534 lacks (EACCES from DAC where nothing of
		// klock's decides pathname unix connects first). The attempt is a CONSUMES
		// of an undeclared file: strict mode kills.
		w := harness.NewWorld(t)
		dir := w.O("run")
		w.Dir(dir)
		sock := filepath.Join(dir, "klockd.sock")
		srv, err := daemon.Listen(daemon.Config{Socket: sock, Backends: &session.Shared{}})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve()
		defer srv.Shutdown(context.Background())
		step := "unix:" + sock
		// bpf-lsm, and with Landlock the cgroup AF_UNIX hooks where the
		// kernel has them, decide the undeclared name before the kernel
		// looks it up (and DAC refuses): EPERM.
		want := "EACCES"
		if harness.LSM() || detect.UnixHooks() == nil {
			want = "EPERM"
		}
		o := w.Run(harness.Spec{Mode: policy.ModePermissive, Intents: harness.ProbeIntents(), Command: []string{harness.Probe, step}})
		if o.Probe[step] != want {
			t.Fatalf("connect to klockd = %q, want %s\n%s", o.Probe[step], want, o.Dump())
		}
		o = w.Run(harness.Spec{Intents: harness.ProbeIntents(), Command: []string{harness.Probe, step}})
		o.AssertKilledFor(t, "CONSUMES FILE:"+sock, sock, msg("CONSUMES", sock, ""), true)
		if got := srv.Sessions(); len(got) != 0 {
			t.Errorf("klockd has sessions: %+v", got)
		}
	})

	t.Run("move to the parent cgroup", func(t *testing.T) {
		w := harness.NewWorld(t)
		id := harness.NewID()
		steps := []string{"cgmove:" + procs, "cgroup"}
		// Permissive first: the exact errno, and the agent still in its group.
		o := w.Run(harness.Spec{Mode: policy.ModePermissive, ID: id, Intents: harness.ProbeIntents(), Command: append([]string{harness.Probe}, steps...)})
		if o.Probe[steps[0]] != "EACCES" || o.Probe["cgroup-line"] != "0::/" {
			t.Fatalf("cgmove=%s cgroup=%q, want EACCES and 0::/\n%s", o.Probe[steps[0]], o.Probe["cgroup-line"], o.Dump())
		}
		if harness.LSM() {
			// The kernel's permission check (the file is root's) refuses
			// the open before any LSM hook runs: nothing was attempted
			// that klock sees, and the agent stayed in its group.
			o.AssertClean(t, 0)
			return
		}
		o.AssertViolation(t, "MUTATES FILE:"+procs, procs, true)
		// Strict: the attempt kills the session.
		o = w.Run(harness.Spec{Intents: harness.ProbeIntents(), Command: append([]string{harness.Probe}, steps...)})
		o.AssertKilledFor(t, "MUTATES FILE:"+procs, procs, msg("MUTATES", "FILE:"+procs, o.Declared(t, policy.FileTriple(policy.Mutates, procs))), true)
	})
}

// TestStrictKillsWholeTree: a background sleeper that would outlive the
// session holds the write end of a pipe; after the violation kill, the
// pipe reaches EOF, so every process that held it is dead. Without the kill
// the agent would wait for the sleeper until the test's session timeout.
func TestStrictKillsWholeTree(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.O("secret.txt"), "secret\n")
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	intents := []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/sleep", "PROVIDES PROC:/usr/bin/cat"}
	script := `sleep 1000 & echo sleeper=$!; cat "$O/secret.txt"; wait; echo survived`
	o := w.Run(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c", script},
		Env: []string{"O=" + w.Outside}, Stdout: wr, Timeout: 30 * time.Second})
	wr.Close()
	target := w.O("secret.txt")
	o.AssertKilledFor(t, "CONSUMES FILE:"+target, target, msg("CONSUMES", "FILE:"+target, ""), true)
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("the pipe did not reach EOF (a session process survived the kill): %v; read %q", err, out)
	}
	if !strings.Contains(string(out), "sleeper=") || strings.Contains(string(out), "survived") {
		t.Errorf("agent output %q: want the sleeper started and the agent killed before it finished", out)
	}
	if o.Res.Exit.Signal.String() != "killed" {
		t.Errorf("agent exit %v, want killed by SIGKILL", o.Res.Exit)
	}
}

// TestPermissiveLearnRoundTrip: permissive mode lets the session finish
// (undeclared operations are still refused by the walls, and recorded as
// leases); Result.Learned parses, and fed back as the manifest in strict
// mode the same run is CLEAN, with every operation now succeeding.
// TestPermissiveLeaseOpensTheWall: a refused read in permissive mode is
// leased. bpf-lsm's rules are amended in the kernel with the lease, so the
// agent's retry reads the file; a Landlock ruleset cannot be widened once
// the agent runs, so there the retry stays refused (and is logged under
// the lease, not as a second violation).
func TestPermissiveLeaseOpensTheWall(t *testing.T) {
	w := harness.NewWorld(t)
	secret := w.O("secret.txt")
	w.File(secret, "secret\n")
	step := "retry-read:" + secret
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Intents: harness.ProbeIntents(), Command: []string{harness.Probe, step}})
	if o.Res.Killed || o.Res.Exit.ExitCode() != 0 {
		t.Fatalf("permissive session killed or failed\n%s", o.Dump())
	}
	want := "EACCES"
	if harness.LSM() {
		want = "ok"
	}
	if got := o.Probe[step]; got != want {
		t.Errorf("read retried after the lease = %s, want %s\n%s", got, want, o.Dump())
	}
	if len(o.Log.Violations) != 1 || o.Log.Violations[0].Lease != "CONSUMES FILE:"+secret {
		t.Errorf("violations %+v, want one, leased as CONSUMES FILE:%s\n%s", o.Log.Violations, secret, o.Dump())
	}
}

func TestPermissiveLearnRoundTrip(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("data.txt"), "data\n")
	w.File(w.O("secret.txt"), "secret\n")
	tcp := listenTCP(t)
	decl := listenTCP(t) // a declared NET intent: the agent's namespace is joined to the host (netwall)
	udp := listenUDP(t)
	steps := []string{
		"read:" + w.O("secret.txt"),
		"append:" + w.W("data.txt"),
		"create:" + w.W("new.txt"),
		"exec:/usr/bin/true",
		fmt.Sprintf("tcp:127.0.0.1:%d", tcp.port),
		fmt.Sprintf("udp:127.0.0.1:%d", udp.port),
	}
	intents := append([]string{
		"CONSUMES FILE:" + w.W("data.txt"),
		fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", decl.port),
	}, harness.ProbeIntents()...)
	cmd := append([]string{harness.Probe}, steps...)
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Intents: intents, Command: cmd})
	if o.Res.Killed || o.Res.Exit.ExitCode() != 0 {
		t.Fatalf("permissive session killed or failed\n%s", o.Dump())
	}
	for _, s := range steps {
		if got := o.Probe[s]; got != "EACCES" && got != "EPERM" {
			t.Errorf("permissive %s = %s, want the wall's refusal (permissive mode does not lower the walls)", s, got)
		}
	}
	if len(o.Log.Violations) != len(steps) {
		t.Errorf("%d violations logged, want %d\n%s", len(o.Log.Violations), len(steps), o.Dump())
	}
	if o.Res.Learned == nil {
		t.Fatal("no learned manifest")
	}
	learned, err := policy.Parse("learned.yaml", o.Res.Learned)
	if err != nil {
		t.Fatalf("learned manifest does not parse: %v\n%s", err, o.Res.Learned)
	}
	if learned.Workdir != w.Workdir {
		t.Errorf("learned workdir %q", learned.Workdir)
	}
	o2 := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: o.Res.Learned, Command: cmd})
	o2.AssertClean(t, 0)
	for _, s := range steps {
		if o2.Probe[s] != "ok" {
			t.Errorf("strict rerun %s = %s, want ok", s, o2.Probe[s])
		}
	}
	if !tcp.accepted() || udp.received() != harness.Payload {
		t.Error("the rerun's network operations did not arrive")
	}
	if got := w.Content(w.W("new.txt")); got != harness.Payload {
		t.Errorf("new.txt = %q", got)
	}
}

// TestExitStatusPropagates: the agent's exit status is the session's.
func TestExitStatusPropagates(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{Intents: []string{"PROVIDES PROC:" + dash(t)}, Command: []string{"/bin/sh", "-c", "exit 7"}})
	o.AssertClean(t, 7)
	if o.Res.Exit.Code != 7 || o.Res.Exit.Signal != 0 {
		t.Errorf("exit %+v, want code 7", o.Res.Exit)
	}
	if o.Log.Exit.Code == nil || *o.Log.Exit.Code != 7 {
		t.Errorf("log exit %+v, want code 7", o.Log.Exit)
	}
}

// TestBackgroundChildrenEndWithTheAgent: the session ends when the agent's
// command exits; what it left running in the background (pid 1 of its pid
// namespace gone) ends with it and changes nothing afterwards, and the
// session is clean with the command's exit status.
func TestBackgroundChildrenEndWithTheAgent(t *testing.T) {
	w := harness.NewWorld(t)
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	intents := []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/sleep", "PROVIDES FILE:" + w.W("**")}
	script := `(sleep 1; echo late > "$W/late.txt") & exit 3`
	o := w.Run(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c", script},
		Env: []string{"W=" + w.Workdir}, Stdout: wr, Timeout: 30 * time.Second})
	wr.Close()
	o.AssertClean(t, 3)
	// The pipe's write end was inherited by the background child: EOF
	// says it is gone.
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	if out, err := io.ReadAll(r); err != nil {
		t.Fatalf("the pipe did not reach EOF (the background child outlived the session): %v; read %q", err, out)
	}
	time.Sleep(1500 * time.Millisecond) // past the child's own sleep
	if _, err := os.Lstat(w.W("late.txt")); !os.IsNotExist(err) {
		t.Fatalf("late.txt: %v, want it never written (the background child outlived the agent)", err)
	}
}

// TestNetlinkIsNotARawSocket: a netlink socket is SOCK_RAW, but it talks
// to the kernel (glibc lists the interfaces through one for getifaddrs and
// getaddrinfo(AI_ADDRCONFIG)): with no NET intent it opens, and a strict
// session ends clean, while a raw IP socket is still NET:raw.
func TestNetlinkIsNotARawSocket(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{Intents: harness.ProbeIntents(), Command: []string{harness.Probe, "netlink"}})
	o.AssertClean(t, 0)
	if got := o.Probe["netlink"]; got != "ok" {
		t.Fatalf("netlink socket: %q, want ok", got)
	}
	for _, ob := range o.Log.Observed {
		if strings.Contains(ob.Triple, "NET:") {
			t.Errorf("observed %s: a netlink socket is no network operation", ob.Triple)
		}
	}
}

// TestAnyPortBind: binding port 0 asks the kernel for any free port.
// "PROVIDES NET:127.0.0.1:0/tcp" declares that: the bind and the listen go
// through and are logged as port 0, not as the port the kernel picked
// (which no manifest could name before the run).
func TestAnyPortBind(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "PROVIDES NET:127.0.0.1:0/tcp"),
		Command: []string{harness.Probe, "listen0:127.0.0.1"}})
	o.AssertClean(t, 0)
	if got := o.Probe["listen0:127.0.0.1"]; got != "ok" {
		t.Fatalf("listen on 127.0.0.1:0: %q, want ok", got)
	}
	var provides []string
	for _, ob := range o.Log.Observed {
		if strings.HasPrefix(ob.Triple, "PROVIDES NET:") {
			provides = append(provides, ob.Triple)
		}
	}
	if len(provides) != 1 || provides[0] != "PROVIDES NET:127.0.0.1:0/tcp" {
		t.Fatalf("observed %v, want the bind and listen as PROVIDES NET:127.0.0.1:0/tcp", provides)
	}
}

// TestRenameToANewName: rename(2) of a file to a name where nothing is
// (the tracepoint backend cannot see whether a rename replaced something,
// and the pre-flight backup says nothing was there) is PROVIDES on the
// destination, not MUTATES: PROVIDES and RENAMES on the directory let it
// through, while a rename over a file that was there stays MUTATES.
func TestRenameToANewName(t *testing.T) {
	w := harness.NewWorld(t)
	w.Dir(w.W("out"))
	w.File(w.W("out", "old.txt"), "old\n")
	intents := append([]string{"PROVIDES FILE:" + w.W("out") + "/**", "RENAMES FILE:" + w.W("out") + "/**"}, harness.ProbeIntents()...)
	a, b := w.W("out", "a"), w.W("out", "b")
	o := w.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, "create:" + a, "rename:" + a + ">" + b}})
	o.AssertClean(t, 0)
	if !w.Exists(b) {
		t.Fatal("out/b was not made by the rename")
	}
	over := w.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, "create:" + a, "rename:" + a + ">" + w.W("out", "old.txt")}})
	tr := policy.FileTriple(policy.Mutates, w.W("out", "old.txt"))
	if over.Log.Verdict != vlog.VerdictViolation || len(over.Log.Violations) == 0 || over.Log.Violations[0].Triple != tr.String() {
		t.Fatalf("a rename over a file that was there: verdict %s, want a violation on %s\n%s", over.Log.Verdict, tr, over.Dump())
	}
}

// TestDeclaredHostIsLookedUpThroughTheProxy: a NET intent that names a
// host implies looking it up, through the session's DNS proxy only
// (TestHostNameFollowsDNS): the system's name servers are walled off, as
// they are from a manifest that names only addresses.
func TestDeclaredHostIsLookedUpThroughTheProxy(t *testing.T) {
	w := harness.NewWorld(t)
	resolver := "127.0.0.1"
	if data, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "nameserver" && net.ParseIP(f[1]).To4() != nil {
				resolver = f[1]
				break
			}
		}
	}
	step := "udp:" + resolver + ":53"
	byName := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:localhost:9/tcp"), Command: []string{harness.Probe, step}})
	if v := byName.Violation("CONSUMES NET:" + resolver + ":53/udp"); v == nil || !v.Blocked || byName.Log.Verdict != vlog.VerdictViolation {
		t.Fatalf("a DNS query to the system's %s with a host declared: verdict %s; want it refused, a violation\n%s", resolver, byName.Log.Verdict, byName.Dump())
	}
	byAddr := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:127.0.0.1:9/tcp"), Command: []string{harness.Probe, step}})
	if byAddr.Log.Verdict != vlog.VerdictViolation {
		t.Fatalf("a DNS query with only addresses declared: verdict %s, want a violation\n%s", byAddr.Log.Verdict, byAddr.Dump())
	}
}

// TestWorkdirThatIsALinkIsRefused: paths below the workdir are the agent's
// and no link among them is followed, so a workdir that is itself a link
// would wall nothing the agent touches through its target: the session is
// refused before it starts, saying so.
func TestWorkdirThatIsALinkIsRefused(t *testing.T) {
	w := harness.NewWorld(t)
	link := w.Workdir + "-link"
	if err := os.Symlink(w.Workdir, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	m, err := policy.Parse("m.yaml", []byte(harness.ManifestYAML(link, policy.ModeStrict, []string{"PROVIDES PROC:/usr/bin/true"})))
	if err != nil {
		t.Fatal(err)
	}
	_, err = session.Run(context.Background(), session.Options{Manifest: m, Command: []string{"/usr/bin/true"}, Backend: harness.Backend(),
		User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID}, Snapshot: session.Backup(nil)})
	if !errors.Is(err, session.ErrSetup) || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("a workdir that is a link: %v, want ErrSetup saying so", err)
	}
}

// TestEmptyNameIsNoViolation: open("") fails with ENOENT before the kernel
// looks anything up (Python's and Node's runtimes do it): nothing was
// read, so a strict session goes on and ends clean.
func TestEmptyNameIsNoViolation(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{Intents: []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/cat"},
		Command: []string{"/bin/sh", "-c", `cat "" 2>/dev/null; echo after`}})
	o.AssertClean(t, 0)
	if !strings.Contains(o.Stdout, "after") {
		t.Fatalf("the agent did not go on: %q", o.Stdout)
	}
}

// TestSessionIsOnRecordFromItsStart: before its agent starts, a session's
// log is on disk, INCOMPLETE and naming the klock process that runs it, so
// a session whose klock is killed stays on record with how to undo it; the
// real log replaces it at the end. A session that never starts its agent
// leaves no log.
func TestSessionIsOnRecordFromItsStart(t *testing.T) {
	w := harness.NewWorld(t)
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	id := harness.NewID()
	logPath := filepath.Join(w.Workdir, ".klock", "sessions", id)
	seen := make(chan *vlog.Log, 1)
	go func() {
		defer close(seen)
		// The agent's first line: it runs, so its log must be on disk.
		if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
			return
		}
		if l, err := vlog.Read(logPath); err == nil {
			seen <- l
		}
	}()
	o := w.Run(harness.Spec{ID: id, Intents: []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/sleep"},
		Command: []string{"/bin/sh", "-c", "echo up; sleep 1"}, Stdout: wr})
	wr.Close()
	o.AssertClean(t, 0)
	during := <-seen
	if during == nil {
		t.Fatalf("no verification log at %s while the agent ran", logPath)
	}
	if !during.Incomplete() || during.Verdict != vlog.VerdictIncomplete || during.KlockPID != os.Getpid() || during.Session != id {
		t.Fatalf("log while running: incomplete %v verdict %q klock pid %d (want %d) session %q", during.Incomplete(), during.Verdict, during.KlockPID, os.Getpid(), during.Session)
	}
	if o.Log.Incomplete() || o.Log.Verdict != vlog.VerdictClean {
		t.Fatalf("final log: incomplete %v verdict %q", o.Log.Incomplete(), o.Log.Verdict)
	}

	m, err := policy.Parse("m.yaml", []byte(harness.ManifestYAML(w.Workdir, policy.ModeStrict, []string{"PROVIDES PROC:" + dash(t)})))
	if err != nil {
		t.Fatal(err)
	}
	failed := harness.NewID()
	_, err = session.Run(context.Background(), session.Options{Manifest: m, ID: failed, Command: []string{"/nonexistent/agent"},
		User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID}, Snapshot: session.Backup(nil), Backend: harness.Backend()})
	if err == nil {
		t.Fatal("a session of a command that does not exist started")
	}
	if _, err := os.Lstat(filepath.Join(w.Workdir, ".klock", "sessions", failed)); !os.IsNotExist(err) {
		t.Fatalf("a session that never started its agent left a log: %v", err)
	}
}

// TestDeclaredThroughLinks: a manifest names binaries the way people type
// them ("PROVIDES PROC:/bin/sh"), the kernel by what they resolve to
// (/usr/bin/dash on Debian, through the /bin -> usr/bin link of a merged
// /usr). Links root made are followed at session start, so the exec is
// declared and counted under the intent as written.
func TestDeclaredThroughLinks(t *testing.T) {
	w := harness.NewWorld(t)
	if dash(t) == "/bin/sh" {
		t.Log("/bin/sh is no link here: the session must run clean all the same")
	}
	o := w.Run(harness.Spec{
		Intents: []string{"PROVIDES PROC:/bin/sh"},
		Command: []string{"/bin/sh", "-c", "echo linked=ok"},
	})
	o.AssertClean(t, 0)
	if o.Probe["linked"] != "ok" {
		t.Errorf("agent output %q", o.Stdout)
	}
	if n, ok := o.Use("PROVIDES PROC:/bin/sh"); !ok || n == 0 {
		t.Errorf("PROVIDES PROC:/bin/sh used %d times (%v), want the exec counted there\n%s", n, ok, o.Dump())
	}
}

// TestKlockMakesNoDirectory: "PROVIDES FILE:<W>/out/**" and "PROVIDES
// PROC:<W>/proj/build/*" with out/ and proj/ missing. klock used to make
// them before the wall was planned, which changed what the agent did: its
// `cp -r src proj` then copied into proj/src. Now nothing is made: the
// rules go on the nearest existing directory (the workdir), where the
// observer decides each operation against the declared patterns. The
// agent makes out/ and proj/ itself; what it builds in proj/build runs; a
// write to <W>/a.txt, which the wider wall lets through on Landlock, is a
// violation all the same (blocked by bpf-lsm, detected and rolled back on
// Landlock), and the rollback removes what the session made.
func TestKlockMakesNoDirectory(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.W("a.txt"), "orig\n")
	w.File(w.W("src", "main.c"), "int main(void){return 0;}\n")
	intents := []string{"PROVIDES PROC:" + dash(t), "PROVIDES PROC:/usr/bin/cp", "PROVIDES PROC:/usr/bin/mkdir",
		"CONSUMES FILE:" + w.Workdir + "/**", "PROVIDES FILE:" + w.W("out") + "/**",
		"PROVIDES FILE:" + w.W("proj") + "/**", "PROVIDES PROC:" + w.W("proj", "build") + "/*"}
	o := w.Run(harness.Spec{Intents: intents, Command: []string{"/bin/sh", "-c",
		`cp -r src proj && mkdir -p proj/build out && cp /usr/bin/true proj/build/t && proj/build/t && echo ran > out/r`}})
	o.AssertClean(t, 0)
	if !w.Exists(w.W("proj", "main.c")) || w.Exists(w.W("proj", "src")) {
		t.Errorf("cp -r src proj must make proj/main.c (proj did not exist), not proj/src\n%s", o.Dump())
	}
	if got := w.Content(w.W("out", "r")); got != "ran\n" {
		t.Errorf("out/r = %q: the program built in proj/build did not run\n%s", got, o.Dump())
	}

	w2 := harness.NewWorld(t)
	w2.File(w2.W("a.txt"), "orig\n")
	intents = append([]string{"CONSUMES FILE:" + w2.Workdir + "/**", "PROVIDES FILE:" + w2.W("out") + "/**"}, harness.ProbeIntents()...)
	mk, create, write := "mkdir:"+w2.W("out"), "create:"+w2.W("out", "new.txt"), "write:"+w2.W("a.txt")
	o = w2.Run(harness.Spec{Intents: intents, Command: []string{harness.Probe, mk, create, write}})
	if o.Probe[create] != "ok" {
		t.Errorf("probe %s = %q, want ok\n%s", create, o.Probe[create], o.Dump())
	}
	tr := policy.FileTriple(policy.Mutates, w2.W("a.txt"))
	o.AssertKilledFor(t, tr.String(), w2.W("a.txt"), msg("MUTATES", "FILE:"+w2.W("a.txt"), o.Declared(t, tr)), harness.LSM())
	if got := w2.Content(w2.W("a.txt")); got != "orig\n" {
		t.Errorf("a.txt = %q, want it back as it was", got)
	}
	if w2.Exists(w2.W("out")) {
		t.Error("out/, which the session made, survived the strict kill's rollback")
	}
}

// TestRepeatsKeepTheirFirstVerdict: the kernel counts an open it reported
// once instead of reporting it again, and hands the counts over when the
// session ends. Those repeats count under the verdict their first report
// got: an agent that creates a file where it may only create and delete,
// appends to it three times (its own file: allowed as created by the
// session) and removes it did nothing wrong. Judged again at the end,
// against a session in which the file no longer existed, the repeats
// were violations: the finished session was killed and rolled back.
func TestRepeatsKeepTheirFirstVerdict(t *testing.T) {
	w := harness.NewWorld(t)
	out := w.W("out")
	w.Dir(out)
	f := filepath.Join(out, "scratch.txt")
	intents := append([]string{"PROVIDES FILE:" + out + "/**", "DELETES FILE:" + out + "/**"}, harness.ProbeIntents()...)
	steps := []string{"create:" + f, "append:" + f, "append:" + f, "append:" + f, "unlink:" + f}
	o := w.Run(harness.Spec{Intents: intents, Command: append([]string{harness.Probe}, steps...)})
	o.AssertClean(t, 0)
	for _, s := range steps {
		if o.Probe[s] != "ok" {
			t.Errorf("probe %s = %s, want ok\n%s", s, o.Probe[s], o.Dump())
		}
	}
	mutates := policy.FileTriple(policy.Mutates, f).String()
	ob := o.Observed(mutates)
	if ob == nil {
		t.Fatalf("no %s observed\n%s", mutates, o.Dump())
	}
	// Three opens for appending: one reported, two counted in the kernel
	// (so the count also shows that repeats were handed over).
	if ob.Count != 3 || ob.AllowedBy != "created by the session" || ob.Violation {
		t.Errorf("%s: count %d allowed by %q violation %v, want 3 opens allowed as created by the session\n%s",
			mutates, ob.Count, ob.AllowedBy, ob.Violation, o.Dump())
	}
}

// TestObserveBackendLearnsTheWholeRun: a Landlock wall cannot be widened
// while the agent runs, so a permissive session there stops most agents at
// their first refused operation and --learn sees only that much. With
// --backend observe no file wall is up: every operation goes ahead and is
// recorded, and the learned manifest, fed back in strict mode (with the
// suite's wall), runs the same agent clean. Strict mode refuses observe.
func TestObserveBackendLearnsTheWholeRun(t *testing.T) {
	w := harness.NewWorld(t)
	w.File(w.O("secret.txt"), "secret\n")
	w.File(w.W("data.txt"), "data\n")
	// A listener in the test's own network namespace: an observe session
	// has none of its own, so the agent reaches it, and learns it.
	ln := listenTCP(t)
	undeclared := []string{
		"read:" + w.O("secret.txt"),
		"append:" + w.W("data.txt"),
		"create:" + w.W("new.txt"),
		"exec:/usr/bin/true",
		fmt.Sprintf("tcp:127.0.0.1:%d", ln.port),
	}
	// Its own file where it may only create: allowed as the session's, but
	// a Landlock wall cannot tell, so the learned manifest must declare the
	// read and the removal for the strict rerun to get through.
	own := w.W("out", "own.txt")
	w.Dir(w.W("out"))
	steps := append(undeclared, "create:"+own, "read:"+own, "unlink:"+own)
	cmd := append([]string{harness.Probe}, steps...)
	intents := append([]string{"CONSUMES FILE:" + w.W("data.txt"), "PROVIDES FILE:" + w.W("out") + "/**"}, harness.ProbeIntents()...)
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Backend: session.BackendObserve, Intents: intents, Command: cmd})
	if o.Res.Killed || o.Res.Exit.ExitCode() != 0 {
		t.Fatalf("permissive observe session killed or failed\n%s", o.Dump())
	}
	for _, s := range steps {
		if o.Probe[s] != "ok" {
			t.Errorf("observe: %s = %s, want ok (no file wall)\n%s", s, o.Probe[s], o.Dump())
		}
	}
	if got := w.Content(w.W("new.txt")); got != harness.Payload {
		t.Errorf("new.txt = %q: the create did not take effect", got)
	}
	if len(o.Log.Violations) != len(undeclared) {
		t.Errorf("%d violations recorded, want %d (one per undeclared step)\n%s", len(o.Log.Violations), len(undeclared), o.Dump())
	}
	for _, v := range o.Log.Violations {
		if v.Blocked || v.Action != "amended" {
			t.Errorf("violation %s: blocked %v action %s, want recorded and amended", v.Triple, v.Blocked, v.Action)
		}
	}
	if len(o.Log.Backends) == 0 || o.Log.Backends[0].Name != "observe-only" || o.Log.Backends[0].Guarantee != vlog.GuaranteeRecords {
		t.Errorf("backends %+v, want observe-only first, recording only", o.Log.Backends)
	}
	if !ln.accepted() {
		t.Error("the observe session's connection did not reach the listener")
	}
	network := false
	for _, b := range o.Log.Backends {
		network = network || b.Name == "network" && b.Guarantee == vlog.GuaranteeRecords
		if b.Name == "netns" || b.Name == "cgroup-net" {
			t.Errorf("a network wall ran in an observe session: %+v", b)
		}
	}
	if !network {
		t.Errorf("backends %+v: no network entry recording only", o.Log.Backends)
	}
	for _, b := range o.Log.Backends {
		if b.Name == "landlock" || b.Name == "bpf-lsm" {
			t.Errorf("a file wall ran in an observe session: %+v", b)
		}
	}
	if o.Res.Learned == nil {
		t.Fatal("no learned manifest")
	}
	if err := os.Remove(w.W("new.txt")); err != nil { // the rerun creates it again
		t.Fatal(err)
	}
	o2 := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: o.Res.Learned, Command: cmd})
	o2.AssertClean(t, 0)
	if !ln.accepted() {
		t.Error("the strict rerun's declared connection did not reach the listener")
	}
	for _, s := range steps {
		if o2.Probe[s] != "ok" {
			t.Errorf("strict rerun with the learned manifest: %s = %s, want ok", s, o2.Probe[s])
		}
	}
	learned, err := policy.Parse("learned.yaml", o.Res.Learned)
	if err != nil {
		t.Fatal(err)
	}
	_, err = session.Run(context.Background(), session.Options{Manifest: learned, Mode: policy.ModeStrict, Backend: session.BackendObserve, Command: cmd})
	if !errors.Is(err, session.ErrObserveStrict) {
		t.Errorf("strict session with --backend observe: %v, want ErrObserveStrict", err)
	}
}

// TestProvidesReadsBackWhatItMade: a manifest that lets the agent make
// files in its workdir and nothing more (no CONSUMES there) lets it read
// back what it made, as SQLite and tempfile's w+ do: a file made O_RDWR
// and an unnamed O_TMPFILE one, CLEAN under the wall. A file that was
// there before stays out of reach (CONSUMES of it is a violation).
func TestProvidesReadsBackWhatItMade(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{
		Intents: append(harness.ProbeIntents(), "PROVIDES FILE:"+w.W("**")),
		Command: []string{harness.Probe, "create-rw:" + w.W("made.db"), "tmpfile-rw:" + w.Workdir},
	})
	o.AssertClean(t, 0)
	for _, step := range []string{"create-rw:" + w.W("made.db"), "tmpfile-rw:" + w.Workdir} {
		if got := o.Probe[step]; got != "ok" {
			t.Errorf("%s = %q, want ok\n%s", step, got, o.Dump())
		}
	}
	w2 := harness.NewWorld(t)
	w2.File(w2.W("before.txt"), "was here\n")
	o2 := w2.Run(harness.Spec{
		Intents: append(harness.ProbeIntents(), "PROVIDES FILE:"+w2.W("**")),
		Command: []string{harness.Probe, "read:" + w2.W("before.txt")},
	})
	if !o2.Res.Killed || o2.Res.Violation == nil || !strings.Contains(o2.Res.Violation.Error(), "CONSUMES on "+w2.W("before.txt")) {
		t.Errorf("reading a file that was there before: killed %v, violation %v; want CONSUMES of it killed\n%s", o2.Res.Killed, o2.Res.Violation, o2.Dump())
	}
}

// TestTmpfileLearnedByItsDirectory: an unnamed file (O_TMPFILE) the
// kernel names "#<inode>" in its directory is learned by the directory,
// never by that name (which no later run's file has): the strict run of
// what was learned, making another one, is CLEAN.
func TestTmpfileLearnedByItsDirectory(t *testing.T) {
	w := harness.NewWorld(t)
	cmd := []string{harness.Probe, "tmpfile-rw:" + w.Workdir}
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Backend: session.BackendObserve, Intents: harness.ProbeIntents(), Command: cmd})
	if o.Res.Learned == nil || strings.Contains(string(o.Res.Learned), "/#") {
		t.Fatalf("learned manifest names the unnamed file's inode:\n%s", o.Res.Learned)
	}
	o2 := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: o.Res.Learned, Command: cmd})
	o2.AssertClean(t, 0)
}

// TestNamesInAZappedPage: an agent makes and removes directories whose
// names sit in a page the kernel keeps losing from the page tables (as
// reclaim and compaction do to a busy process): the observer's read of such
// a name faults, and it reads the name back from the agent afterwards. The
// agent could have rewritten it by then, so the name stands in strict mode
// only where the wall, which judged the kernel's copy, is exact for the
// operation:
//   - intents on the workdir's whole tree: the wall grants making and
//     removing names there and nowhere else, so CLEAN, nothing left behind;
//   - intents on out/**: removing out/ itself is a right on the workdir,
//     which Landlock grants over the whole workdir (wider than declared):
//     killed, failing closed on the first name read back. bpf-lsm decides
//     each operation on the kernel's copy of its name: CLEAN there.
func TestNamesInAZappedPage(t *testing.T) {
	for _, c := range []struct {
		name  string
		scope func(w *harness.World) string
		clean bool
	}{
		{"exact wall", func(w *harness.World) string { return w.W("**") }, true},
		{"widened wall", func(w *harness.World) string { return w.W("out", "**") }, harness.LSM()},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := harness.NewWorld(t)
			w.Dir(w.W("out"))
			step := "zapped-mkdir:" + w.W("out")
			o := w.Run(harness.Spec{
				Intents: []string{"PROVIDES FILE:" + c.scope(w), "DELETES FILE:" + c.scope(w), "PROVIDES PROC:" + harness.Probe},
				Command: []string{harness.Probe, step},
			})
			if !c.clean {
				if !o.Res.Killed || !strings.Contains(o.Res.Reason, "back from the agent afterwards") {
					t.Errorf("want a kill for a name read back under a widened wall, got killed=%v %q\n%s", o.Res.Killed, o.Res.Reason, o.Dump())
				}
				return
			}
			o.AssertClean(t, 0)
			if o.Probe[step] != "ok" {
				t.Errorf("probe %s = %q, want ok\n%s", step, o.Probe[step], o.Dump())
			}
			if left, _ := os.ReadDir(w.W("out")); len(left) != 0 {
				t.Errorf("%d directories left in out/", len(left))
			}
		})
	}
}
