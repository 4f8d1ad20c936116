package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/harness"
)

// greeter is a host loopback HTTP service that answers every request
// with the client's address as it sees it, and records them.
type greeter struct {
	port  int
	mu    sync.Mutex
	peers []netip.AddrPort
}

func startGreeter(t *testing.T) *greeter {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &greeter{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap := netip.MustParseAddrPort(r.RemoteAddr)
		g.mu.Lock()
		g.peers = append(g.peers, ap)
		g.mu.Unlock()
		fmt.Fprintf(w, "from=%s", ap)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

func (g *greeter) clients() []netip.AddrPort {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]netip.AddrPort(nil), g.peers...)
}

// handoffClients are the agent's clients: curl (a non-blocking connect
// polled), python's blocking socket (which prints its own local port
// beside what the service saw), python's asyncio (non-blocking, its
// event loop registering the socket after the connect), then curl to a
// port no intent declares.
const handoffClients = `set -u
curl -sS --max-time 10 http://127.0.0.1:$1/; echo " curl"
$2 -I -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
body = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    body += b
print(body.split(b"\r\n\r\n", 1)[1].decode(), "local=%d" % s.getsockname()[1], "blocking")
' $1
$2 -I -c '
import asyncio, sys
async def main():
    r, w = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    w.write(b"GET / HTTP/1.0\r\n\r\n")
    await w.drain()
    body = await r.read()
    print(body.split(b"\r\n\r\n", 1)[1].decode(), "asyncio")
asyncio.run(main())
' $1
curl -sS --max-time 10 http://127.0.0.1:$3/ >/dev/null 2>&1; echo "undeclared exit=$?"
`

// TestHandOffRealClients: in a strict session that declares a host
// loopback service (and no egress budget), curl and python reach it,
// blocking and non-blocking, each over a socket klock connected in the
// host's namespace and handed to them (the service sees the client's own
// local port, from the host's loopback: one hop); a port no intent
// declares is still refused by the wall (a strict kill), and its service
// never sees the agent; the log says the path: addfd.
func TestHandOffRealClients(t *testing.T) {
	testutil.RequirePrivileged(t)
	if os.Getenv("KLOCK_IN_VM") == "1" {
		// The VM's root has neither curl nor python; the probe's rows
		// (TestIPv6LoopbackRelayed, TestRelayedEgressCountedAndBudgeted)
		// take the handoff there.
		t.Skip("real clients run on the host (the VM has no curl or python)")
	}
	py := harness.Real(t, "/usr/bin/python3")
	curl := harness.Real(t, "/usr/bin/curl")
	sh := harness.Real(t, "/bin/sh")
	w := harness.NewWorld(t)
	svc, other := startGreeter(t), startGreeter(t)
	name := "NET:127.0.0.1:" + strconv.Itoa(svc.port) + "/tcp"
	o := w.Run(harness.Spec{
		Intents: []string{"PROVIDES PROC:" + sh, "PROVIDES PROC:" + curl, "PROVIDES PROC:" + py, "CONSUMES " + name},
		Command: []string{sh, "-c", handoffClients, "sh", strconv.Itoa(svc.port), py, strconv.Itoa(other.port)},
	})
	t.Logf("agent:\n%s", o.Stdout)
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(o.Stdout), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 {
			lines[f[len(f)-1]] = l
		}
	}
	for _, k := range []string{"curl", "blocking", "asyncio"} {
		if !strings.HasPrefix(lines[k], "from=127.0.0.1:") {
			t.Errorf("%s: %q, want the service's answer\n%s", k, lines[k], o.Dump())
		}
	}
	// python's own local port is the one the service saw: no relay hop.
	if f := strings.Fields(lines["blocking"]); len(f) == 3 && strings.TrimPrefix(f[0], "from=127.0.0.1:") != strings.TrimPrefix(f[1], "local=") {
		t.Errorf("python's socket is at %s, the service saw %s: a second hop", f[1], f[0])
	}
	// The wall refuses it (cgroup-net, in the agent's namespace) and,
	// strict, kills the session for it.
	undeclared := "NET:127.0.0.1:" + strconv.Itoa(other.port) + "/tcp"
	if !o.Res.Killed || !strings.Contains(o.Res.Reason, undeclared) || strings.Contains(o.Stdout, "undeclared exit=0") {
		t.Errorf("an undeclared port: killed %v (%s), stdout %q", o.Res.Killed, o.Res.Reason, o.Stdout)
	}
	if c := other.clients(); len(c) > 0 {
		t.Errorf("the undeclared service saw %v", c)
	}
	for _, c := range svc.clients() {
		if c.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("the service saw a client from %s", c)
		}
	}
	c, ok := peerCounts(o.Log, name)
	if !ok || c.Via != "loopback relay (addfd)" || c.InBytes == 0 || c.OutBytes == 0 {
		t.Errorf("the log's counters for %s: %+v, want them via the relay's addfd, counted\n%+v", name, c, o.Log.Network)
	}
}

// TestHandOffReported: a connect the relay answers at its trap is judged
// as the walls' reports are, under either file wall (the Landlock wall's
// syscall tracepoints report it; under bpf-lsm, whose session has none
// and whose cgroup-net hooks a handed-over connect never reaches, the
// relay does). Two connects to a declared host loopback service, handed
// over (the log says addfd), are two uses of its intent, each reported
// once, and the intent is not listed unused; a handed socket connected
// again, to a port no intent declares, is refused at the trap (EISCONN)
// and still a violation that kills the strict session, and that port's
// service never sees the agent.
func TestHandOffReported(t *testing.T) {
	testutil.RequirePrivileged(t)
	w := harness.NewWorld(t)
	lo := netip.MustParseAddr("127.0.0.1")
	svc, other := startSink(t, lo), startSink(t, lo)
	ap := func(s *sink) string { return "127.0.0.1:" + strconv.Itoa(s.port) }
	intent := "CONSUMES NET:" + ap(svc) + "/tcp"
	steps := []string{"tcp:" + ap(svc), "tcp:" + ap(svc)}
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), intent), Command: append([]string{harness.Probe}, steps...)})
	o.AssertClean(t, 0)
	// Both handshakes were done before the connects returned: the
	// accepts only wait for the sink's goroutine (bounded, not timed).
	for deadline := time.Now().Add(5 * time.Second); svc.conns.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if o.Probe[steps[0]] != "ok" || svc.conns.Load() != 2 {
		t.Fatalf("the declared service: probe %q, it accepted %d connections\n%s", o.Probe[steps[0]], svc.conns.Load(), o.Dump())
	}
	if got, ok := o.Use(intent); !ok || got != 2 {
		t.Errorf("uses of %s = %d (listed %v), want 2 (each connect once)\n%s", intent, got, ok, o.Dump())
	}
	if slices.Contains(o.Log.Unused, intent) {
		t.Errorf("%s is listed unused: %q", intent, o.Log.Unused)
	}
	source := "tracepoint"
	if harness.LSM() {
		source = "loopback-relay"
	}
	if ob := o.Observed(intent); ob == nil || ob.Count != 2 || ob.Failed != 0 || ob.Source != source {
		t.Errorf("observed %s: %+v, want 2 connects, none failed, reported by %s\n%s", intent, ob, source, o.Dump())
	}
	if c, ok := peerCounts(o.Log, intent[len("CONSUMES "):]); !ok || c.Via != handOffVia() {
		t.Errorf("the log's counters for %s: %+v, want them via %s", intent, c, handOffVia())
	}

	undeclared := "NET:" + ap(other) + "/tcp"
	o = w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), intent),
		Command: []string{harness.Probe, "reconnect:" + ap(svc) + ">" + ap(other)}})
	if !o.Res.Killed || !strings.Contains(o.Res.Reason, undeclared) || o.Violation("CONSUMES "+undeclared) == nil {
		t.Errorf("a handed socket connected again to an undeclared port: killed %v (%s), want a violation of %s\n%s", o.Res.Killed, o.Res.Reason, undeclared, o.Dump())
	}
	if n := other.conns.Load(); n > 0 {
		t.Errorf("the undeclared service accepted %d connections", n)
	}
}

// TestHandOffSignalled: a connect to a declared host loopback service
// that signals keep interrupting while the relay answers it (each one
// takes the thread out of the trapped call, and the call runs again) is
// one use of its intent, reported once and not failed, and the session is
// clean: an interrupted call's exit is not its answer.
func TestHandOffSignalled(t *testing.T) {
	testutil.RequirePrivileged(t)
	w := harness.NewWorld(t)
	svc := startSink(t, netip.MustParseAddr("127.0.0.1"))
	ap := "127.0.0.1:" + strconv.Itoa(svc.port)
	intent := "CONSUMES NET:" + ap + "/tcp"
	step := "tcp-signalled:" + ap
	for range 3 {
		o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), intent), Command: []string{harness.Probe, step}})
		o.AssertClean(t, 0)
		if o.Probe[step] != "ok" {
			t.Fatalf("the declared service: probe %q\n%s", o.Probe[step], o.Dump())
		}
		if got, ok := o.Use(intent); !ok || got != 1 {
			t.Errorf("uses of %s = %d (listed %v), want 1\n%s", intent, got, ok, o.Dump())
		}
		if ob := o.Observed(intent); ob == nil || ob.Count != 1 || ob.Failed != 0 {
			t.Errorf("observed %s: %+v, want 1 connect, not failed\n%s", intent, ob, o.Dump())
		}
	}
	// Where the trap's wait is killable only once klock read the call,
	// no signal makes klock connect twice for one call.
	if !killableRecv() {
		t.Log("no SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (before 5.19): a signal after klock read the call may make it connect again, so the service's count is not checked")
		return
	}
	for deadline := time.Now().Add(5 * time.Second); svc.conns.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // any extra connection has arrived by now, or never will
	if n := svc.conns.Load(); n != 3 {
		t.Errorf("the service accepted %d connections for 3 connects", n)
	}
}

// killableRecv probes for SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux
// 5.19): the kernel checks a filter's flags (EINVAL) before it reads the
// program (EFAULT for none), so nothing is installed.
func killableRecv() bool {
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, 0)
	return e == unix.EFAULT
}
