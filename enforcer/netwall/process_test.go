//go:build linux

package netwall

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

// helperEnv makes the test binary the agent: born in a network namespace
// of its own (as the launcher's stage 2), it waits for a line on stdin
// (the session's Release), then connects to each address in its arguments
// and prints "ok" or the error, one line each.
const helperEnv = "KLOCK_NETWALL_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		for _, a := range os.Args[1:] {
			c, err := net.DialTimeout("tcp4", a, time.Second)
			if err != nil {
				fmt.Println(a, "error:", err)
				continue
			}
			c.Close()
			fmt.Println(a, "ok")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The session's sequence: the agent's first process is born in a new
// network namespace and waits; Setup walls it by pid; then it runs. It
// reaches the declared peer and not the undeclared one.
func TestAgentProcessByPid(t *testing.T) {
	privileged(t)
	declared, undeclared := hostAddrs(t)
	ld := listen(t, -1, declared)
	lu := listen(t, -1, undeclared)
	okAddr := netip.AddrPortFrom(declared, ld.port).String()
	noAddr := netip.AddrPortFrom(undeclared, lu.port).String()
	cmd := exec.Command(os.Args[0], okAddr, noAddr)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	w, err := Setup(context.Background(), testID(t), Target{Pid: cmd.Process.Pid}, Config{Peers: []Peer{
		{Name: "declared", Prefix: netip.PrefixFrom(declared, 32), Ports: policy.PortRange{Lo: ld.port, Hi: ld.port}, Proto: policy.ProtoTCP},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fmt.Fprintln(stdin, "go")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, okAddr+" ok") {
		t.Errorf("declared peer not reached:\n%s", got)
	}
	if !strings.Contains(got, noAddr+" error") || lu.conns.Load() != 0 {
		t.Errorf("undeclared peer reached (%d connections):\n%s", lu.conns.Load(), got)
	}
	// The agent is gone, so is its namespace, and the kernel removed the
	// veth pair with it: Close has only the table left to remove.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if tb, l := exists(t, w.ID); tb || l {
		t.Errorf("after Close: table %v, link %v", tb, l)
	}
}
