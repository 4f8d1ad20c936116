package testutil

import (
	"net"
	"sync/atomic"
	"testing"
)

// TCPListener listens on addr (network "tcp4" or "tcp6", port 0) on
// loopback, accepts and closes every connection until the test ends, and
// returns the listener (its port is in Addr).
func TCPListener(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	l, _ := CountingListener(t, network, addr)
	return l
}

// CountingListener is TCPListener that also counts the connections it
// accepted: a test shows that none came.
func CountingListener(t testing.TB, network, addr string) (net.Listener, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l, &n
}

// UDPAndTCP listens on one port of host (IPv4) for both UDP and TCP, as a
// DNS server does. The UDP port is the kernel's choice; the same TCP port
// may be taken meanwhile (by an outgoing connection's local port: tests
// on a busy host make many), so it tries again with another port.
func UDPAndTCP(t testing.TB, host string) (net.PacketConn, net.Listener) {
	t.Helper()
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp4", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
		lastErr = err
	}
	t.Fatalf("no port free for both UDP and TCP on %s: %v", host, lastErr)
	return nil, nil
}
