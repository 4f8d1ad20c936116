//go:build linux

package session

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSystemResolvers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# a comment\nsearch example.org\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nnameserver not-an-address\noptions ndots:2\n"), 0o644)
	want := []netip.Addr{netip.MustParseAddr("10.255.255.53"), netip.MustParseAddr("fe80::1")}
	if got := systemResolvers(p); !slices.Equal(got, want) {
		t.Errorf("systemResolvers = %v, want %v", got, want)
	}
	if got := systemResolvers(filepath.Join(t.TempDir(), "none")); len(got) != 2 || got[0] != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("without a resolv.conf: %v, want glibc's loopback default", got)
	}
}
