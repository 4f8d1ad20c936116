package hostlisten

import (
	"errors"
	"testing"
)

// TestListenOnlyOnLoopbackWithoutTLS: loopback addresses listen; others
// are refused without TLS; half a TLS pair is refused.
func TestListenOnlyOnLoopbackWithoutTLS(t *testing.T) {
	for _, a := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		ln, err := Listen(a, "", "")
		if err != nil {
			if a == "[::1]:0" {
				continue // a host without IPv6 loopback
			}
			t.Fatalf("%s: %v", a, err)
		}
		ln.Close()
	}
	for _, a := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0"} {
		if _, err := Listen(a, "", ""); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("%s: %v, want ErrNotLoopback", a, err)
		}
	}
	if _, err := Listen("127.0.0.1:0", "c.pem", ""); !errors.Is(err, ErrHalfTLS) {
		t.Errorf("a certificate without its key: %v, want ErrHalfTLS", err)
	}
	if _, err := Listen("nonsense", "", ""); err == nil {
		t.Error("an address without a port listened")
	}
}

// TestLoopback: which addresses reach only this host.
func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "127.9.9.9:1": true,
		"0.0.0.0:1": false, ":1": false, "[::]:1": false, "10.0.0.1:1": false} {
		if got, err := Loopback(addr); err != nil || got != want {
			t.Errorf("Loopback(%s) = %v %v", addr, got, err)
		}
	}
}
