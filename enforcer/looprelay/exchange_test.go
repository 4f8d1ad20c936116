//go:build linux

package looprelay

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netns"
)

// stream is n deterministic pseudo-random bytes and their digest.
func stream(seed uint64, n int) ([]byte, [32]byte) {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b, sha256.Sum256(b)
}

// TestExchangeIntact: an agent in the namespace and a host loopback
// service, through the relay, each send the other several MB and
// half-close; "both" at once, or "service first" (its bytes and its FIN
// before the agent sends anything, the agent still sending after the
// service's half-close). Each side checks the digest of what it read; the
// counters are exact; the flow is gone once both sides closed.
func TestExchangeIntact(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, order := range []string{"both", "service first"} {
		t.Run(order, func(t *testing.T) {
			ns := testutil.NewNetNS(t)
			exchange(t, relayFor(t, ns), ns, order, 5<<20+123, 3<<20+7)
		})
	}
}

func exchange(t *testing.T, r *Relay, ns netns.NsHandle, order string, up, down int) {
	upB, upSum := stream(1, up)
	downB, downSum := stream(2, down)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	svc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			svc <- err
			return
		}
		defer c.Close()
		read := make(chan [32]byte, 1)
		readAll := func() {
			h := sha256.New()
			io.Copy(h, c)
			read <- [32]byte(h.Sum(nil))
		}
		if order == "both" {
			go readAll()
		}
		if _, err := c.Write(downB); err != nil {
			svc <- err
			return
		}
		c.(*net.TCPConn).CloseWrite()
		if order != "both" {
			readAll()
		}
		if got := <-read; got != upSum {
			svc <- fmt.Errorf("the service read %x..., want %x... (agent to service)", got[:6], upSum[:6])
			return
		}
		svc <- nil
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := r.Add("peer", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	err = testutil.InNetNS(ns, func() error {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(lo, port).String())
		if err != nil {
			return err
		}
		defer c.Close()
		read := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(c)
			read <- b
		}()
		var got []byte
		if order != "both" {
			got = <-read
		}
		if _, err := c.Write(upB); err != nil {
			return err
		}
		c.(*net.TCPConn).CloseWrite()
		if order == "both" {
			got = <-read
		}
		if sha256.Sum256(got) != downSum {
			return fmt.Errorf("the agent read %d bytes, want %d (service to agent); equal: %v", len(got), down, bytes.Equal(got, downB))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-svc; err != nil {
		t.Fatal(err)
	}
	waitFlowsGone(t, r)
	c := r.Counters()["peer"]
	if c.OutBytes != uint64(up) || c.InBytes != uint64(down) || c.OutPackets == 0 || c.InPackets == 0 {
		t.Errorf("counters %+v, want %d bytes out, %d in", c, up, down)
	}
}

// waitFlowsGone waits for the relay to let go of its flows once both
// sides closed: no connection left open, no host-side end still owned.
func waitFlowsGone(t *testing.T, r *Relay) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.flows)
		r.mu.Unlock()
		owned := 0
		r.owned.Range(func(any, any) bool { owned++; return true })
		if n == 0 && owned == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connection end(s) and %d owned address(es) left after both sides closed", n, owned)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowServiceHoldsTheAgent: a service that reads nothing stops the
// agent's sends after a bounded amount (the sockets' buffers and the
// relay's): the relay never queues without limit on the agent's behalf.
// (Sockmap's egress redirect, tried for speed, did: 1 GiB in under two
// seconds on 6.18, into kernel memory.)
func TestSlowServiceHoldsTheAgent(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns := testutil.NewNetNS(t)
	r := relayFor(t, ns)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	release := make(chan struct{})
	defer close(release)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			<-release
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := r.Add("peer", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	const bound = 128 << 20
	var sent int
	err = testutil.InNetNS(ns, func() error {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(lo, port).String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1<<20)
		for sent < bound {
			n, err := c.Write(buf)
			sent += n
			if err != nil {
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sent >= bound {
		t.Errorf("the agent sent %d MiB to a service that reads nothing", sent>>20)
	}
	t.Logf("held after %d MiB; counted out %d", sent>>20, r.Counters()["peer"].OutBytes)
}

// TestBudgetHoldsTheFlow: past SetBudget's limit the relay forwards
// nothing more out (the service reads exactly the limit), calls over
// once, and holds the flow (the agent's send does not complete) until
// Close; a datagram past it is not forwarded.
func TestBudgetHoldsTheFlow(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns := testutil.NewNetNS(t)
	r := relayFor(t, ns)
	const limit = 100000
	var overs atomic.Int32
	r.SetBudget(limit, func() { overs.Add(1) })
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, c)
		read <- n
	}()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := make(chan int, 10)
	go func() {
		b := make([]byte, 1500)
		for {
			n, _, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			got <- n
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	uport := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := r.Add("tcp", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("udp", lo, policy.PortRange{Lo: uport, Hi: uport}, policy.ProtoUDP); err != nil {
		t.Fatal(err)
	}
	var agent net.Conn
	sent := make(chan error, 1)
	err = testutil.InNetNS(ns, func() error {
		if agent, err = net.Dial("tcp4", netip.AddrPortFrom(lo, port).String()); err != nil {
			return err
		}
		go func() {
			_, err := agent.Write(make([]byte, 1<<20))
			if err == nil {
				agent.(*net.TCPConn).CloseWrite()
				_, err = agent.Read(make([]byte, 1))
			}
			sent <- err
		}()
		u, err := net.Dial("udp4", netip.AddrPortFrom(lo, uport).String())
		if err != nil {
			return err
		}
		defer u.Close()
		time.Sleep(200 * time.Millisecond) // the TCP flow spent the budget
		_, err = u.Write([]byte("past the budget"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	select {
	case err := <-sent:
		t.Fatalf("the agent's send completed (%v): not held", err)
	case n := <-got:
		t.Errorf("a datagram of %d bytes past the budget was forwarded", n)
	case <-time.After(500 * time.Millisecond):
	}
	if n := overs.Load(); n != 1 {
		t.Errorf("over called %d times, want 1", n)
	}
	// What went out is counted as delivered, what was held as over: the
	// agent's bytes are all counted, never the held ones as delivered.
	if c := r.Counters(); c["tcp"].OutBytes != limit || c["tcp"].OverBytes == 0 || c["udp"].OutPackets != 0 || c["udp"].OverPackets != 1 {
		t.Errorf("counters %+v: want the limit delivered, the rest and the datagram over", c)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := <-read; n != limit {
		t.Errorf("the service read %d bytes, want the limit, %d", n, limit)
	}
	select {
	case <-sent: // let go by Close
	case <-time.After(5 * time.Second):
		t.Error("the agent still held after Close")
	}
}
