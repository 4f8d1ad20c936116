//go:build linux

package session

import (
	"bufio"

	"github.com/klocklabs/klock/enforcer/decide"
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

// hostsFile is where the C library looks names up before it asks a name
// server.
const hostsFile = "/etc/hosts"

// hostsEntries reads a hosts file: each name (canonical and aliases, lower
// case) with the addresses its lines give it, in the file's order. A
// missing or unreadable file has none.
func hostsEntries(path string) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		for _, name := range fields[1:] {
			name = strings.ToLower(name)
			out[name] = append(out[name], a.WithZone("").Unmap())
		}
	}
	return out
}

// learnHostsFile tells a learning run's engine the hosts file's answers:
// the agent's resolver reads the file before it asks a name server, so a
// name there is what the agent looked up (decide uses them only when the
// agent read the file).
func learnHostsFile(eng *decide.Engine, path string) {
	for name, addrs := range hostsEntries(path) {
		eng.Lookup(name, addrs, decide.FromHosts)
	}
}
