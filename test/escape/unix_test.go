//go:build linux

package escape

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/test/internal/harness"
)

// cutShort is the probe's result for a sendmmsg the kernel stopped at a
// refused message after sending the one before it.
const cutShort = "error: sent 1 of 2"

// unixListeners are a row's AF_UNIX listeners: an undeclared stream socket
// <O>/sock and datagram socket <O>/dsock, and a declared datagram socket
// <W>/ok.dsock (CONSUMES <W>/**). Mode 0777: the agent's uid may reach them,
// so only klock stands in the way.
type unixListeners struct {
	stream *net.UnixListener
	dgram  *net.UnixConn
	ok     *net.UnixConn
}

func unixListen(t *testing.T, e *env) {
	t.Helper()
	l := &unixListeners{}
	var err error
	if l.stream, err = net.ListenUnix("unix", &net.UnixAddr{Name: e.O("sock"), Net: "unix"}); err != nil {
		t.Fatal(err)
	}
	if l.dgram, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: e.O("dsock"), Net: "unixgram"}); err != nil {
		t.Fatal(err)
	}
	if l.ok, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: e.W("ok.dsock"), Net: "unixgram"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.stream.Close(); l.dgram.Close(); l.ok.Close() })
	for _, p := range []string{e.O("sock"), e.O("dsock"), e.W("ok.dsock")} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	e.unix = l
}

// heardNothing checks no connection or datagram reached the undeclared
// listeners (unix sockets deliver synchronously: what the session sent is
// queued by now; the deadlines only bound the check). Where the kernel
// has no hook that decides pathname sockets before the effect (detected
// rows), the strict kill came after: the check is skipped there.
func heardNothing(want expect) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, _ *harness.Outcome) {
		t.Helper()
		if want == detected && !harness.LSM() {
			return
		}
		l := e.unix
		l.stream.SetDeadline(time.Now().Add(20 * time.Millisecond))
		if c, err := l.stream.Accept(); err == nil {
			c.Close()
			t.Errorf("a connection reached %s", e.O("sock"))
		}
		l.dgram.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		b := make([]byte, 64)
		if n, _, err := l.dgram.ReadFrom(b); err == nil {
			t.Errorf("a datagram %q reached %s", b[:n], e.O("dsock"))
		}
	}
}

// unixRows: connects and datagrams to a pathname socket nobody declared.
// Landlock (ABI < 9) cannot wall them; where the kernel has the cgroup
// AF_UNIX hooks (6.7+, feature-probed) unixguard refuses them before the
// listener hears anything, bpf-lsm does in the VM (unix_stream_connect,
// unix_may_send, socket_connect), and elsewhere the tracepoints detect
// them after the effect and strict mode kills.
func unixRows(t *testing.T) []row {
	want, how := detected, "no cgroup AF_UNIX hooks on this kernel and no bpf-lsm: the connect or send completes; the observer reports CONSUMES FILE of the socket and strict mode kills"
	if err := detect.UnixHooks(); err == nil {
		want, how = blocked, "cgroup/connect_unix and sendmsg_unix refuse the undeclared socket path (EPERM) before the kernel looks it up: the listener hears nothing"
	}
	errno := ""
	if want == blocked {
		errno = "EPERM"
	}
	sock := func(e *env) string { return e.O("sock") }
	dsock := func(e *env) string { return e.O("dsock") }
	r := func(name, step string, target func(*env) string) row {
		return row{
			name: name, why: how, setup: unixListen,
			steps: func(e *env) []string { return []string{step + ":" + target(e)} },
			want:  want, errno: errno, triple: file("CONSUMES", target),
			check: heardNothing(want),
		}
	}
	rows := []row{
		r("connect to an undeclared unix stream socket", "unix", sock),
		r("connect a datagram socket to an undeclared unix socket", "unixdg", dsock),
		r("sendto an undeclared unix datagram socket", "unixsendto", dsock),
		r("sendmsg to an undeclared unix datagram socket", "unixsendmsg", dsock),
		r("sendmmsg to an undeclared unix datagram socket", "unixsendmmsg", func(e *env) string { return e.O("dsock") + ">" + e.O("dsock") }),
	}
	rows[4].triple = file("CONSUMES", dsock)
	// Every message of a sendmmsg is decided: the first goes to a
	// declared socket, the second is refused.
	mixed := row{
		name: "sendmmsg: a declared socket first, then an undeclared one", setup: unixListen,
		steps: func(e *env) []string { return []string{"unixsendmmsg:" + e.W("ok.dsock") + ">" + e.O("dsock")} },
		want:  blocked, errno: cutShort, triple: file("CONSUMES", dsock),
		why:   "the kernel runs the hook for each message: the first (declared) goes, the second is refused (EPERM) and sendmmsg returns 1",
		check: heardNothing(blocked),
	}
	if want == detected {
		mixed.escape = "the tracepoints report only sendmmsg's first address, and no hook decides the others on this kernel: the second message reaches the undeclared socket unseen"
	}
	rows = append(rows, mixed, row{
		name:  "a unix socket the agent binds in its scope stays usable",
		why:   "the agent binds <W>/rw/own.sock (PROVIDES), listens and connects to it (CONSUMES <W>/**): every wall leaves it alone",
		steps: func(e *env) []string { return []string{"unixown:" + e.W("rw", "own.sock")} },
		want:  allowed,
	})
	return rows
}
