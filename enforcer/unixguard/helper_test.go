//go:build linux

package unixguard

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/internal/testutil"
)

// The test binary doubles as the process inside the session cgroup: with
// helperEnv set it performs the operations named in its arguments with raw
// syscalls and prints "op => result" per operation ("ok", a count, or the
// errno's name).
const helperEnv = "KLOCK_UNIXGUARD_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "ops" {
		for _, op := range os.Args[1:] {
			fmt.Printf("%s => %s\n", op, runOp(op))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return "error: " + err.Error()
}

func addr(name string) *unix.SockaddrUnix {
	// "@x" is the abstract name x, as Go's net package spells it.
	return &unix.SockaddrUnix{Name: name}
}

// runOp performs one operation, "kind:target":
//
//	connect:P     connect an AF_UNIX stream socket to P
//	dgconnect:P   connect an AF_UNIX datagram socket to P (no datagram)
//	sendto:P      sendto from an unconnected datagram socket
//	sendmsg:P     sendmsg with P as msg_name
//	sendmmsg:P,Q  one sendmmsg of two datagrams, to P then Q: the number sent, or the errno
//	own:P         bind a stream socket at P, listen, connect to it from another socket
//	chdir:D       change the working directory (for relative names)
func runOp(op string) string {
	kind, target, _ := strings.Cut(op, ":")
	switch kind {
	case "chdir":
		return errName(unix.Chdir(target))
	case "connect", "own":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return errName(err)
		}
		defer unix.Close(fd)
		if kind == "own" {
			l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return errName(err)
			}
			defer unix.Close(l)
			if err := unix.Bind(l, addr(target)); err != nil {
				return "bind " + errName(err)
			}
			if err := unix.Listen(l, 1); err != nil {
				return "listen " + errName(err)
			}
		}
		return errName(unix.Connect(fd, addr(target)))
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return errName(err)
	}
	defer unix.Close(fd)
	switch kind {
	case "dgconnect":
		return errName(unix.Connect(fd, addr(target)))
	case "sendto":
		return errName(unix.Sendto(fd, []byte(op), 0, addr(target)))
	case "sendmsg":
		_, err := unix.SendmsgN(fd, []byte(op), nil, addr(target), 0)
		return errName(err)
	case "sendmmsg":
		p, q, _ := strings.Cut(target, ",")
		n, err := sendmmsg(fd, op, p, q)
		if err != nil {
			return errName(err)
		}
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("error: unknown op %q", op)
}

// runOps runs the test binary in helper mode inside cg and returns each
// operation's result.
func runOps(t testing.TB, cg *cgroup.Group, ops ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], ops...)
	cmd.Env = append(os.Environ(), helperEnv+"=ops")
	cmd.Stderr = os.Stderr
	fd, err := os.OpenFile(cg.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %v: %v\n%s", ops, err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if op, res, ok := strings.Cut(sc.Text(), " => "); ok {
			got[op] = res
		}
	}
	return got
}

func sendmmsg(fd int, payload string, names ...string) (int, error) {
	return testutil.UnixSendmmsg(fd, []byte(payload), names...)
}
