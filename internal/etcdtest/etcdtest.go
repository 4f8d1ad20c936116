// Package etcdtest starts real etcd clusters (Debian's etcd-server binary)
// on free loopback ports for tests: an N-member cluster in t.TempDir(),
// its client endpoints, and faults on a member (kill -9, SIGSTOP,
// SIGCONT). A missing etcd binary is testutil.Unavailable.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/internal/testutil"
)

// Member is one etcd process.
type Member struct {
	Name    string
	Client  string // http://127.0.0.1:port
	peer    string
	cmd     *exec.Cmd
	Stopped bool
	Killed  bool
	logFile *os.File
}

// Cluster is a running cluster; Stop runs at the test's cleanup.
type Cluster struct {
	Members []*Member
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs an n-member cluster and waits until it answers.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		testutil.Unavailable(t, "no etcd binary (scripts/deps.sh installs etcd-server)")
	}
	dir := t.TempDir()
	c := &Cluster{}
	var initial []string
	for i := 0; i < n; i++ {
		m := &Member{Name: fmt.Sprintf("m%d", i),
			Client: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			peer:   fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.peer)
	}
	for _, m := range c.Members {
		log, err := os.Create(filepath.Join(dir, m.Name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		m.logFile = log
		m.cmd = exec.Command(bin, "--name", m.Name, "--data-dir", filepath.Join(dir, m.Name),
			"--listen-client-urls", m.Client, "--advertise-client-urls", m.Client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "klock-test", "--heartbeat-interval", "50", "--election-timeout", "500")
		m.cmd.Stdout, m.cmd.Stderr = log, log
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Stop)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := cli.Put(ctx, "/etcdtest/ready", "1"); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("etcd cluster did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// Endpoints are the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	var e []string
	for _, m := range c.Members {
		e = append(e, m.Client)
	}
	return e
}

// Client is a client of the whole cluster, closed at cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Leader is the member that leads now (nil if none answers).
func (c *Cluster) Leader(ctx context.Context, cli *clientv3.Client) *Member {
	for _, m := range c.Members {
		if m.Killed || m.Stopped {
			continue
		}
		st, err := cli.Status(ctx, m.Client)
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	return nil
}

// Kill sends SIGKILL to m.
func (m *Member) Kill() {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	m.Killed = true
}

// Pause stops m (SIGSTOP); Resume continues it.
func (m *Member) Pause()  { _ = m.cmd.Process.Signal(syscall.SIGSTOP); m.Stopped = true }
func (m *Member) Resume() { _ = m.cmd.Process.Signal(syscall.SIGCONT); m.Stopped = false }

// Stop kills every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.Killed {
			continue
		}
		if m.Stopped {
			m.Resume()
		}
		m.Kill()
		m.logFile.Close()
	}
}
