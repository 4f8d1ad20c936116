package testutil

import (
	"net"
	"testing"
)

// TCPListener listens on addr (network "tcp4" or "tcp6", port 0) on
// loopback, accepts and closes every connection until the test ends, and
// returns the listener (its port is in Addr).
func TCPListener(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}
