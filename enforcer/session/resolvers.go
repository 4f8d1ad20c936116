//go:build linux

package session

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
)

// resolvConf is where the C library finds its name servers.
const resolvConf = "/etc/resolv.conf"

// systemResolvers are the name servers the agent's resolver asks: the
// nameserver lines of path (its zone index dropped), else 127.0.0.1 and
// ::1, which glibc uses when there are none.
func systemResolvers(path string) []netip.Addr {
	var out []netip.Addr
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 || fields[0] != "nameserver" {
				continue
			}
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, a.WithZone(""))
			}
		}
	}
	if len(out) == 0 {
		out = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	}
	return out
}
