//go:build linux

package session

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

type cgroupDir struct {
	Ino  uint64
	Path string
}

// ownCgroup is the cgroup v2 directory this process is in (its inode
// number is the cgroup id).
func ownCgroup(t *testing.T) cgroupDir {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var rel string
	for _, l := range strings.Split(string(data), "\n") {
		if r, ok := strings.CutPrefix(l, "0::"); ok {
			rel = r
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var fs unix.Statfs_t
		var st unix.Stat_t
		if unix.Statfs(root, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC && unix.Stat(root+rel, &st) == nil {
			return cgroupDir{Ino: st.Ino, Path: root + rel}
		}
	}
	testutil.Unavailable(t, fmt.Sprintf("no cgroup v2 hierarchy holds this process (%q)", rel))
	return cgroupDir{}
}

// TestPeerCgroup: the kernel names the cgroup a client socket was made in,
// for UDP and TCP.
func TestPeerCgroup(t *testing.T) {
	testutil.RequirePrivileged(t)
	own := ownCgroup(t)
	srv, err := net.ListenPacket("udp4", "127.77.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	server := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := peerCgroup("udp", c.LocalAddr().(*net.UDPAddr).AddrPort(), server)
	if err != nil || id != own.Ino {
		t.Errorf("udp: cgroup %d, %v; want %d (%s)", id, err, own.Ino, own.Path)
	}
	ln, err := net.Listen("tcp4", server.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tc, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	id, err = peerCgroup("tcp", tc.LocalAddr().(*net.TCPAddr).AddrPort(), netip.MustParseAddrPort(ln.Addr().String()))
	if err != nil || id != own.Ino {
		t.Errorf("tcp: cgroup %d, %v; want %d", id, err, own.Ino)
	}
}

// TestProxyServesTheSessionOnly: a query from a process outside the
// session's cgroup is refused, not forwarded and not reported (it must
// not count as the agent's); from inside, a declared name is answered.
func TestProxyServesTheSessionOnly(t *testing.T) {
	testutil.RequirePrivileged(t)
	own := ownCgroup(t)
	var mu sync.Mutex
	var upstreamSaw []string
	saw := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), upstreamSaw...) }
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		mu.Lock()
		upstreamSaw = append(upstreamSaw, r.Question[0].Name)
		mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP("198.51.100.41")})
		_ = w.WriteMsg(m)
	})}
	go func() { _ = up.ActivateAndServe() }()
	defer up.Shutdown()
	_, rs := compileFor(t, t.TempDir(), "CONSUMES NET:svc.test:443/tcp")
	d, err := startDNS(NewID(time.Now()), t.TempDir(), rs, []string{pc.LocalAddr().String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	ask := func(name string) int {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, d.proxy.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return r.Rcode
	}
	d.setGroup(&cgroup.Group{ID: own.Ino + 1_000_000, Path: t.TempDir()}) // a session this test is not in
	if rc := ask("svc.test."); rc != dns.RcodeRefused {
		t.Errorf("a declared name from outside the session: %s, want REFUSED", dns.RcodeToString[rc])
	}
	if rc := ask("evil.example."); rc != dns.RcodeRefused {
		t.Errorf("an undeclared name from outside the session: %s, want REFUSED", dns.RcodeToString[rc])
	}
	if len(d.refused) != 0 || len(saw()) != 0 {
		t.Errorf("outside queries reported (%d) or forwarded (%v)", len(d.refused), saw())
	}
	d.setGroup(&cgroup.Group{ID: own.Ino, Path: own.Path})
	d.attach(nil, nil)
	if rc := ask("svc.test."); rc != dns.RcodeSuccess || len(saw()) != 1 {
		t.Errorf("a declared name from the session: %s, upstream saw %v", dns.RcodeToString[rc], saw())
	}
	if rc := ask("evil.example."); rc != dns.RcodeRefused || len(d.refused) != 1 {
		t.Errorf("an undeclared name from the session: %s, %d reported", dns.RcodeToString[rc], len(d.refused))
	}
}
