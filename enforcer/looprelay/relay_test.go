//go:build linux

package looprelay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func relayFor(t testing.TB, ns netns.NsHandle) *Relay {
	t.Helper()
	r, err := Open(fmt.Sprintf("/proc/self/fd/%d", int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestTCPAndUDPRelayed: a host loopback echo service, declared, is reached
// from inside the namespace at the same address and port; the bytes are
// counted both ways; the proxy-facing end is Owned; an undeclared port is
// not relayed (refused in the namespace).
func TestTCPAndUDPRelayed(t *testing.T) {
	ns := testutil.NewNetNS(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	owned := make(chan bool, 1)
	r := relayFor(t, ns)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// Owned from before the relay's first byte (as the DNS proxy
		// asks, on a query).
		buf := make([]byte, 100)
		n, _ := c.Read(buf)
		owned <- r.Owns(c.RemoteAddr().(*net.TCPAddr).AddrPort())
		c.Write(buf[:n])
		io.Copy(c, c)
		c.Close()
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	uport := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := r.Add("tcp-peer", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("udp-peer", lo, policy.PortRange{Lo: uport, Hi: uport}, policy.ProtoUDP); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("tcp-peer", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatalf("a second Add of the same peer: %v", err)
	}
	msg := []byte("through the relay")
	err = testutil.InNetNS(ns, func() error {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(lo, port).String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		if string(got) != string(msg) {
			return fmt.Errorf("tcp echo %q, %v", got, err)
		}
		u, err := net.Dial("udp4", netip.AddrPortFrom(lo, uport).String())
		if err != nil {
			return err
		}
		defer u.Close()
		u.Write(msg)
		buf := make([]byte, 100)
		n, err := u.Read(buf)
		if string(buf[:n]) != string(msg) {
			return fmt.Errorf("udp echo %q, %v", buf[:n], err)
		}
		if _, err := net.Dial("tcp4", netip.AddrPortFrom(lo, port+1).String()); !errors.Is(err, unix.ECONNREFUSED) {
			return fmt.Errorf("an undeclared port: %v, want ECONNREFUSED (nothing relays it)", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !<-owned {
		t.Error("the relay does not own its host-side end")
	}
	c := r.Counters()
	n := uint64(len(msg))
	if c["tcp-peer"].OutBytes != n || c["tcp-peer"].InBytes != n || c["udp-peer"].OutBytes != n || c["udp-peer"].InBytes != n || c["udp-peer"].OutPackets != 1 {
		t.Errorf("counters %+v, want %d bytes each way", c, n)
	}
	if got := len(r.Listening()); got != 2 {
		t.Errorf("listening on %v", r.Listening())
	}
}

// TestTooWideAndClosed: a range wider than MaxPorts, or port 0, is not
// relayed; Close ends an open flow (the host's service never closes it)
// and Add after it fails.
func TestTooWideAndClosed(t *testing.T) {
	ns := testutil.NewNetNS(t)
	r := relayFor(t, ns)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := r.Add("wide", lo, policy.PortRange{Lo: 1000, Hi: 1000 + MaxPorts}, policy.ProtoTCP); !errors.Is(err, ErrTooWide) {
		t.Errorf("a range of %d ports: %v, want ErrTooWide", MaxPorts+1, err)
	}
	if err := r.Add("zero", lo, policy.PortRange{}, policy.ProtoTCP); !errors.Is(err, ErrTooWide) {
		t.Errorf("port 0: %v, want ErrTooWide", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // held open, never read to its end
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	if err := r.Add("held", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	var agent net.Conn
	if err := testutil.InNetNS(ns, func() error {
		var err error
		agent, err = net.Dial("tcp4", netip.AddrPortFrom(lo, port).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	svc := <-accepted
	defer svc.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("late", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoUDP); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
}
