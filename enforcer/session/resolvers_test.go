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

func TestHostsEntries(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(p, []byte("127.0.0.1 localhost\n# 10.9.9.9 commented.example\n10.1.2.3\tDB.internal db # the database\nfe80::1%eth0 link.local\nnot-an-address x\n10.1.2.4 db\n"), 0o644)
	got := hostsEntries(p)
	want := map[string][]netip.Addr{
		"localhost":   {netip.MustParseAddr("127.0.0.1")},
		"db.internal": {netip.MustParseAddr("10.1.2.3")},
		"db":          {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.1.2.4")},
		"link.local":  {netip.MustParseAddr("fe80::1")},
	}
	if len(got) != len(want) {
		t.Fatalf("hostsEntries = %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
}
