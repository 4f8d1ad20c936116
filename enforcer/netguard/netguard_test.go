//go:build linux

package netguard

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// ---- fixtures ---------------------------------------------------------------

func newGuard(t testing.TB) *Guard {
	t.Helper()
	testutil.RequirePrivileged(t)
	g, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Guard.Close: %v", err)
		}
	})
	return g
}

func newCgroup(t testing.TB, name string) *cgroup.Group {
	t.Helper()
	cg, err := cgroup.Create(fmt.Sprintf("netguard-test-%d-%s", os.Getpid(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cg.Delete(); err != nil {
			t.Errorf("delete cgroup: %v", err)
		}
	})
	return cg
}

// ruleset parses a manifest with the given intents, compiles it, and
// resolves host names with lookup (nil: leave them unresolved).
func ruleset(t testing.TB, lookup func(string) ([]netip.Addr, error), intents ...string) *policy.Ruleset {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: klock/v1\nagent: {id: netguard-test}\nmode: strict\nbaseline: none\n" +
		"cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, " +
		"expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: \"0.01 USD\", max_cost: \"0.02 USD\"}\n" +
		"intents:\n")
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %s\n", in)
	}
	m, err := policy.Parse("netguard-test.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("manifest:\n%s\n%v", b.String(), err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	if lookup != nil {
		if rs, err = rs.Resolve(lookup); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// tcpListener listens on addr (port 0) and accepts and closes every
// connection; it returns the port.
func tcpListener(t testing.TB, network, addr string) uint16 {
	return uint16(testutil.TCPListener(t, network, addr).Addr().(*net.TCPAddr).Port)
}

func udpReceiver(t testing.TB) (*net.UDPConn, uint16) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func hasIPv6Loopback() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// runOps runs the test binary in helper mode, inside cg (nil: in the test's
// own cgroup), and returns each operation's result and the child's pid.
func runOps(t testing.TB, cg *cgroup.Group, ops ...string) (map[string]string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], ops...)
	cmd.Env = append(os.Environ(), helperEnv+"=ops")
	cmd.Stderr = os.Stderr
	if cg != nil {
		fd, err := os.OpenFile(cg.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %v: %v\n%s", ops, err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		op, res, ok := strings.Cut(sc.Text(), " => ")
		if ok {
			got[op] = res
		}
	}
	return got, cmd.Process.Pid
}

func checkOps(t testing.TB, where string, got map[string]string, want map[string]string) {
	t.Helper()
	for _, op := range slices.Sorted(mapKeys(want)) {
		if got[op] != want[op] {
			t.Errorf("%s: %s = %q, want %q", where, op, got[op], want[op])
		}
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// collect waits for n events (bounded: the kernel wrote them before the
// child exited) and then takes whatever else is already queued.
func collect(t testing.TB, s *Session, n int) []event.Event {
	t.Helper()
	var evs []event.Event
	timeout := time.After(10 * time.Second)
	for len(evs) < n {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatalf("events closed after %d of %d", len(evs), n)
			}
			evs = append(evs, ev)
		case l := <-s.Lost():
			t.Fatalf("lost %d events", l.Count)
		case <-timeout:
			t.Fatalf("got %d events, want %d: %v", len(evs), n, triples(evs))
		}
	}
	for {
		select {
		case ev := <-s.Events():
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

func triples(evs []event.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Syscall+" "+ev.Triple.String())
	}
	slices.Sort(out)
	return out
}

// ---- tests ------------------------------------------------------------------

// TestWall is the end-to-end wall: declared loopback destinations work,
// undeclared ones fail with EPERM at connect, sendto, bind and socket, the
// IPv4-mapped IPv6 form is judged by the IPv4 rules, denials arrive as
// events with the denied triple, a process outside the cgroup is untouched,
// and after Close the same cgroup is unrestricted.
func TestWall(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "wall")

	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	portB := tcpListener(t, "tcp4", "127.0.0.1:0")
	udpA, portUA := udpReceiver(t)
	_, portUB := udpReceiver(t)
	portC, portD := freePort(t), freePort(t)
	v6 := hasIPv6Loopback()
	var port6A uint16
	intents := []string{
		fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", portA),
		fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/udp", portUA),
		fmt.Sprintf("PROVIDES NET:127.0.0.1:%d", portC),
	}
	if v6 {
		port6A = tcpListener(t, "tcp6", "[::1]:0")
		intents = append(intents, fmt.Sprintf("CONSUMES NET:[::1]:%d/tcp", port6A))
	}
	s, err := g.Attach(cg, ruleset(t, nil, intents...))
	if err != nil {
		t.Fatal(err)
	}

	A := fmt.Sprintf("127.0.0.1:%d", portA)
	B := fmt.Sprintf("127.0.0.1:%d", portB)
	mA := fmt.Sprintf("[::ffff:127.0.0.1]:%d", portA)
	mB := fmt.Sprintf("[::ffff:127.0.0.1]:%d", portB)
	UA := fmt.Sprintf("127.0.0.1:%d", portUA)
	UB := fmt.Sprintf("127.0.0.1:%d", portUB)
	mUB := fmt.Sprintf("[::ffff:127.0.0.1]:%d", portUB)
	C := fmt.Sprintf("127.0.0.1:%d", portC)
	D := fmt.Sprintf("127.0.0.1:%d", portD)
	anyC := fmt.Sprintf("0.0.0.0:%d", portC)
	otherLoop := fmt.Sprintf("127.0.0.2:%d", portA)

	want := map[string]string{
		"tcp4:" + A:         "ok",
		"tcp4:" + B:         "EPERM",
		"tcp6:" + mA:        "ok",
		"tcp6:" + mB:        "EPERM",
		"tcp4:" + otherLoop: "EPERM",
		"udp4:" + UA:        "ok",
		"udp4:" + UB:        "EPERM",
		"udp6:" + mUB:       "EPERM",
		"udpc4:" + UB:       "EPERM",
		"udp4:" + A:         "EPERM", // portA is declared for tcp only
		"bind4:" + C:        "ok",
		"bind4:" + D:        "EPERM",
		"bind4:" + anyC:     "EPERM", // 0.0.0.0 is not 127.0.0.1
		"raw4":              "EPERM",
		"raw6":              "EPERM",
	}
	wantEv := []string{
		"connect CONSUMES NET:" + B + "/tcp",
		"connect CONSUMES NET:" + B + "/tcp", // via ::ffff:127.0.0.1, reported unmapped
		"connect CONSUMES NET:" + otherLoop + "/tcp",
		"sendmsg CONSUMES NET:" + UB + "/udp",
		"sendmsg CONSUMES NET:" + UB + "/udp", // via ::ffff:127.0.0.1
		"connect CONSUMES NET:" + UB + "/udp",
		"sendmsg CONSUMES NET:" + A + "/udp",
		"bind PROVIDES NET:" + D + "/tcp",
		"bind PROVIDES NET:" + anyC + "/tcp",
		"socket CONSUMES NET:raw",
		"socket CONSUMES NET:raw",
	}
	if v6 {
		want[fmt.Sprintf("tcp6:[::1]:%d", port6A)] = "ok"
		want[fmt.Sprintf("tcp6:[::1]:%d", portB)] = "EPERM"
		wantEv = append(wantEv, fmt.Sprintf("connect CONSUMES NET:[::1]:%d/tcp", portB))
	}
	ops := slices.Sorted(mapKeys(want))
	got, pid := runOps(t, cg, ops...)
	checkOps(t, "inside", got, want)

	// The declared datagram arrived.
	buf := make([]byte, 16)
	_ = udpA.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _, err := udpA.ReadFromUDP(buf); err != nil || string(buf[:n]) != "klock" {
		t.Errorf("declared UDP datagram: %q, %v", buf[:n], err)
	}

	evs := collect(t, s, len(wantEv))
	slices.Sort(wantEv)
	if gotEv := triples(evs); !slices.Equal(gotEv, wantEv) {
		t.Errorf("events:\n got %q\nwant %q", gotEv, wantEv)
	}
	for _, ev := range evs {
		if ev.Source != event.SourceCgroupNet || !ev.Blocked || ev.Errno != int32(syscall.EPERM) ||
			int(ev.PID) != pid || ev.TID == 0 || ev.Comm == "" || ev.Time.IsZero() {
			t.Errorf("event fields: %+v (child pid %d)", ev, pid)
		}
	}

	// A process outside the cgroup is not affected.
	outside := map[string]string{
		"tcp4:" + B: "ok", "tcp6:" + mB: "ok", "udp4:" + UB: "ok", "bind4:" + D: "ok", "raw4": "ok",
	}
	got, _ = runOps(t, nil, slices.Sorted(mapKeys(outside))...)
	checkOps(t, "outside", got, outside)

	// After Close the cgroup is unrestricted and the channels are closed.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ = runOps(t, cg, slices.Sorted(mapKeys(outside))...)
	checkOps(t, "after Close", got, outside)
	if _, ok := <-s.Events(); ok {
		t.Error("Events not closed after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	var pol netguardNgPolicy
	if err := g.objs.NgPolicies.Lookup(cg.ID, &pol); err == nil {
		t.Error("rules still in the map after Close")
	}
}

// TestRawDeclared: NET:raw lets raw sockets be created, and declares no
// address.
func TestRawDeclared(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "raw")
	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	s, err := g.Attach(cg, ruleset(t, nil, "CONSUMES NET:raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	A := fmt.Sprintf("127.0.0.1:%d", portA)
	got, _ := runOps(t, cg, "raw4", "raw6", "tcp4:"+A)
	checkOps(t, "raw declared", got, map[string]string{"raw4": "ok", "raw6": "ok", "tcp4:" + A: "EPERM"})
}

// TestPacketSocketNotSeenByCgroupHook pins a kernel fact the integrator must
// cover elsewhere: cgroup/sock_create runs only for AF_INET and AF_INET6
// (inet_create/inet6_create), so an AF_PACKET socket created by a process
// holding CAP_NET_RAW inside the session cgroup is not refused by this
// package. The session wall for AF_PACKET is the dropped CAP_NET_RAW and the
// launcher's seccomp filter. If a kernel starts calling the hook for
// AF_PACKET, this test fails with EPERM and the doc can be updated.
func TestPacketSocketNotSeenByCgroupHook(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "packet")
	s, err := g.Attach(cg, ruleset(t, nil, "CONSUMES NET:127.0.0.1:1/tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _ := runOps(t, cg, "packet")
	checkOps(t, "AF_PACKET as root", got, map[string]string{"packet": "ok"})
}

// TestSubCgroupStaysWalled: a process in a cgroup below the session's is
// decided by the session's rules (ancestor lookup) and its denials reach the
// session.
func TestSubCgroupStaysWalled(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "sub")
	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	portB := tcpListener(t, "tcp4", "127.0.0.1:0")
	s, err := g.Attach(cg, ruleset(t, nil, fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", portA)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	subDir := filepath.Join(cg.Path, "child", "grandchild")
	if err := os.MkdirAll(subDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(subDir)
		os.Remove(filepath.Dir(subDir))
	})
	sub := &cgroup.Group{Path: subDir}
	A, B := fmt.Sprintf("127.0.0.1:%d", portA), fmt.Sprintf("127.0.0.1:%d", portB)
	got, _ := runOps(t, sub, "tcp4:"+A, "tcp4:"+B)
	checkOps(t, "sub-cgroup", got, map[string]string{"tcp4:" + A: "ok", "tcp4:" + B: "EPERM"})
	evs := collect(t, s, 1)
	if gotEv := triples(evs); !slices.Equal(gotEv, []string{"connect CONSUMES NET:" + B + "/tcp"}) {
		t.Errorf("events: %q", gotEv)
	}
}

// TestHostNames: an unresolved host name is refused (never fail open); once
// resolved, its addresses are the rule.
func TestHostNames(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "hosts")
	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	portB := tcpListener(t, "tcp4", "127.0.0.1:0")
	intent := fmt.Sprintf("CONSUMES NET:svc.klock.test:%d/tcp", portA)

	_, err := g.Attach(cg, ruleset(t, nil, intent))
	var ue *UnresolvedError
	if !errors.Is(err, ErrUnresolved) || !errors.As(err, &ue) || ue.Host != "svc.klock.test" || ue.Intent != intent {
		t.Fatalf("unresolved ruleset: err = %v", err)
	}
	// Nothing was attached: the cgroup is still open.
	B := fmt.Sprintf("127.0.0.1:%d", portB)
	got, _ := runOps(t, cg, "tcp4:"+B)
	checkOps(t, "after refused attach", got, map[string]string{"tcp4:" + B: "ok"})

	lookup := func(h string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	s, err := g.Attach(cg, ruleset(t, lookup, intent))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	A := fmt.Sprintf("127.0.0.1:%d", portA)
	got, _ = runOps(t, cg, "tcp4:"+A, "tcp4:"+B)
	checkOps(t, "resolved", got, map[string]string{"tcp4:" + A: "ok", "tcp4:" + B: "EPERM"})
}

// TestAttachErrors: too many rules, a second session on one cgroup.
func TestAttachErrors(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "errors")
	var intents []string
	for i := 0; i <= MaxRules; i++ {
		intents = append(intents, fmt.Sprintf("CONSUMES NET:127.0.%d.%d:443/tcp", i/250, i%250+1))
	}
	_, err := g.Attach(cg, ruleset(t, nil, intents...))
	var te *TooManyRulesError
	if !errors.Is(err, ErrTooManyRules) || !errors.As(err, &te) || te.Limit != MaxRules || te.Intent != intents[MaxRules] {
		t.Fatalf("too many rules: %v", err)
	}
	if !strings.Contains(err.Error(), "256") || !strings.Contains(err.Error(), intents[MaxRules]) {
		t.Errorf("message lacks the limit or the intent: %v", err)
	}
	s, err := g.Attach(cg, ruleset(t, nil, intents[:MaxRules]...))
	if err != nil {
		t.Fatalf("exactly %d rules: %v", MaxRules, err)
	}
	defer s.Close()
	if _, err := g.Attach(cg, ruleset(t, nil, intents[0])); !errors.Is(err, ErrAttach) {
		t.Errorf("second session on one cgroup: %v", err)
	}
}

// TestUpdate: an amended ruleset takes effect without re-attaching.
func TestUpdate(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "update")
	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	portB := tcpListener(t, "tcp4", "127.0.0.1:0")
	A, B := fmt.Sprintf("127.0.0.1:%d", portA), fmt.Sprintf("127.0.0.1:%d", portB)
	s, err := g.Attach(cg, ruleset(t, nil, "CONSUMES NET:"+A+"/tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _ := runOps(t, cg, "tcp4:"+B)
	checkOps(t, "before update", got, map[string]string{"tcp4:" + B: "EPERM"})
	if err := s.Update(ruleset(t, nil, "CONSUMES NET:"+A+"/tcp", "CONSUMES NET:"+B+"/tcp")); err != nil {
		t.Fatal(err)
	}
	got, _ = runOps(t, cg, "tcp4:"+B)
	checkOps(t, "after update", got, map[string]string{"tcp4:" + B: "ok"})
}

func TestProbe(t *testing.T) {
	testutil.RequirePrivileged(t)
	if err := Probe(); err != nil {
		t.Fatal(err)
	}
}

// ---- unprivileged: rule compilation -----------------------------------------

func TestCompile(t *testing.T) {
	rs := ruleset(t, nil,
		"CONSUMES NET:127.0.0.1:80/tcp",
		"PROVIDES NET:127.0.0.1:80/tcp", // merged with the line above
		"CONSUMES NET:10.0.0.0/8:1000-2000",
		"CONSUMES NET:[::1]:53/udp",
		"CONSUMES NET:[::/0]:443/tcp",
		"CONSUMES NET:raw",
	)
	pol, err := compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	if pol.N != 4 || pol.Flags != flagRaw {
		t.Fatalf("n=%d flags=%d", pol.N, pol.Flags)
	}
	type row struct {
		addr, mask string
		lo, hi     uint16
		family     uint8
		proto      uint8
		access     uint8
	}
	hex := func(w [4]uint32) string {
		a, _ := netip.AddrFromSlice(words(w))
		return a.String()
	}
	want := []row{
		{"::ffff:127.0.0.1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 80, 80, afInet, 1, accConnect | accBind},
		{"::ffff:10.0.0.0", "ffff:ffff:ffff:ffff:ffff:ffff:ff00:0", 1000, 2000, afInet, 0, accConnect},
		{"::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 53, 53, afInet6, 2, accConnect},
		{"::", "::", 443, 443, afInet6, 1, accConnect},
	}
	for i, w := range want {
		r := pol.Rules[i]
		got := row{hex(r.Addr), hex(r.Mask), r.PortLo, r.PortHi, r.Family, r.Proto, r.Access}
		if got != w {
			t.Errorf("rule %d: got %+v, want %+v", i, got, w)
		}
	}
	// Round trip of event addresses: IPv4-mapped comes back as IPv4.
	a, _, _ := encodePrefix(netip.MustParsePrefix("127.0.0.1/32"))
	if got := decodeAddr(a, afInet6); got != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("decode mapped: %v", got)
	}
	a, _, _ = encodePrefix(netip.MustParsePrefix("::1/128"))
	if got := decodeAddr(a, afInet6); got != netip.IPv6Loopback() {
		t.Errorf("decode ::1: %v", got)
	}
}

func words(w [4]uint32) []byte {
	b := make([]byte, 16)
	for i := range 4 {
		binary.NativeEndian.PutUint32(b[i*4:], w[i])
	}
	return b
}

func TestToEvent(t *testing.T) {
	a, _, _ := encodePrefix(netip.MustParsePrefix("127.0.0.1/32"))
	r := netguardNgEvent{CgroupId: 7, Pid: 10, Tid: 11, Addr: a, Port: 8080, Family: afInet, Hook: hookBind4, Proto: 2}
	copy(r.Comm[:], []int8{'c', 'u', 'r', 'l'})
	ev := toEvent(&r, time.Unix(1, 0))
	if ev.Triple.String() != "PROVIDES NET:127.0.0.1:8080/udp" || ev.Comm != "curl" || ev.Syscall != "bind" || !ev.Blocked {
		t.Errorf("bind event: %+v", ev)
	}
	r.Hook = hookSockCreate
	if ev := toEvent(&r, time.Now()); ev.Triple != policy.RawSocketTriple() || ev.Syscall != "socket" {
		t.Errorf("socket event: %+v", ev)
	}
}

// TestEscapes: other ways to name a destination reach the same hooks, and
// the known gap (listen without bind) is pinned.
func TestEscapes(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "escapes")
	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	portB := tcpListener(t, "tcp4", "127.0.0.1:0")
	_, portUB := udpReceiver(t)
	s, err := g.Attach(cg, ruleset(t, nil, fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", portA)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	A := fmt.Sprintf("127.0.0.1:%d", portA)
	B := fmt.Sprintf("127.0.0.1:%d", portB)
	UB := fmt.Sprintf("127.0.0.1:%d", portUB)
	want := map[string]string{
		// TCP Fast Open's sendto(MSG_FASTOPEN, addr) connects through the same hook.
		"tfo4:" + B: "EPERM",
		// An AF_INET sockaddr given to an AF_INET6 UDP socket takes the IPv4 path.
		"udp6via4:" + UB:  "EPERM",
		"udpc6via4:" + UB: "EPERM",
		// MPTCP is judged as TCP.
		"mptcp4:" + A: "ok",
		"mptcp4:" + B: "EPERM",
		// Gap: listen() on an unbound socket autobinds an ephemeral port
		// without a bind hook. See doc.go.
		"listen4": "ok",
	}
	got, _ := runOps(t, cg, slices.Sorted(mapKeys(want))...)
	checkOps(t, "escapes", got, want)
	wantEv := []string{
		"connect CONSUMES NET:" + B + "/tcp", // tfo
		"connect CONSUMES NET:" + B + "/tcp", // mptcp
		"sendmsg CONSUMES NET:" + UB + "/udp",
		"connect CONSUMES NET:" + UB + "/udp",
	}
	slices.Sort(wantEv)
	if gotEv := triples(collect(t, s, len(wantEv))); !slices.Equal(gotEv, wantEv) {
		t.Errorf("events:\n got %q\nwant %q", gotEv, wantEv)
	}
}

// TestLossAccounting: when the consumer does not keep up, every denial is
// still accounted for, either as an event or in Lost.
func TestLossAccounting(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "loss")
	_, portUB := udpReceiver(t)
	s, err := g.Attach(cg, ruleset(t, nil, "CONSUMES NET:127.0.0.1:1/tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// More than Events' buffer plus the kernel ring buffer (256 KiB of
	// 72-byte records: 64 of event, 8 of header) can hold while nobody reads:
	// loss is certain.
	const n = EventBuffer + 256*1024/72 + 2000
	op := fmt.Sprintf("x%d:udpc4:127.0.0.1:%d", n, portUB)
	got, _ := runOps(t, cg, op) // nobody reads Events meanwhile
	checkOps(t, "flood", got, map[string]string{op: "EPERM"})
	var events, lost uint64
	timeout := time.After(20 * time.Second)
	for events+lost < n {
		select {
		case <-s.Events():
			events++
		case l := <-s.Lost():
			lost += l.Count
		case <-timeout:
			t.Fatalf("accounted %d events + %d lost of %d denials", events, lost, n)
		}
	}
	if events+lost != n || lost == 0 {
		t.Errorf("events %d + lost %d, want %d with some lost", events, lost, n)
	}
}

// TestReportAllowed: with ReportAllowed the session reports allowed
// operations too (not blocked, no errno), and keeps doing so after Update;
// without it (TestWall) only denials are reported.
func TestReportAllowed(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "report")
	portA := tcpListener(t, "tcp4", "127.0.0.1:0")
	portB := tcpListener(t, "tcp4", "127.0.0.1:0")
	_, portU := udpReceiver(t)
	A, B := fmt.Sprintf("127.0.0.1:%d", portA), fmt.Sprintf("127.0.0.1:%d", portB)
	U := fmt.Sprintf("127.0.0.1:%d", portU)
	s, err := g.Attach(cg, ruleset(t, nil, "CONSUMES NET:"+A+"/tcp", "CONSUMES NET:"+U+"/udp"), ReportAllowed())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _ := runOps(t, cg, "tcp4:"+A, "tcp4:"+B, "udp4:"+U)
	checkOps(t, "report", got, map[string]string{"tcp4:" + A: "ok", "tcp4:" + B: "EPERM", "udp4:" + U: "ok"})
	evs := collect(t, s, 3)
	blocked := map[string]bool{}
	for _, ev := range evs {
		blocked[ev.Syscall+" "+ev.Triple.String()] = ev.Blocked
		if ev.Blocked != (ev.Errno == int32(syscall.EPERM)) {
			t.Errorf("event %+v: blocked and errno disagree", ev)
		}
	}
	want := map[string]bool{
		"connect CONSUMES NET:" + A + "/tcp": false,
		"connect CONSUMES NET:" + B + "/tcp": true,
		"sendmsg CONSUMES NET:" + U + "/udp": false,
	}
	if !maps.Equal(blocked, want) {
		t.Errorf("events %v, want %v", blocked, want)
	}
	if err := s.Update(ruleset(t, nil, "CONSUMES NET:"+A+"/tcp", "CONSUMES NET:"+B+"/tcp")); err != nil {
		t.Fatal(err)
	}
	got, _ = runOps(t, cg, "tcp4:"+B)
	checkOps(t, "after update", got, map[string]string{"tcp4:" + B: "ok"})
	if evs := collect(t, s, 1); evs[0].Blocked || evs[0].Triple.String() != "CONSUMES NET:"+B+"/tcp" {
		t.Errorf("after Update: %+v, want the allowed connect to %s reported", evs[0], B)
	}
}

// TestIPv6Rules: connect6 and sendmsg6 decide global and unique local
// IPv6 destinations as connect4 and sendmsg4 decide IPv4 ones: a prefix
// covers its addresses, on its ports and protocol only, and a denial is
// an event naming the bracketed address.
func TestIPv6Rules(t *testing.T) {
	g := newGuard(t)
	cg := newCgroup(t, "ipv6")
	s, err := g.Attach(cg, ruleset(t, nil, "CONSUMES NET:[fd6b:7465:9::/48]:5300-5310/udp", "CONSUMES NET:[2001:db8::10]:443/tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	allowed := []string{"udpc6:[fd6b:7465:9:1::5]:5305", "udp6:[fd6b:7465:9:ffff::1]:5300"}
	denied := map[string]string{
		"udp6:[fd6b:7465:a::1]:5305":  "sendmsg CONSUMES NET:[fd6b:7465:a::1]:5305/udp",
		"udp6:[fd6b:7465:9::1]:5311":  "sendmsg CONSUMES NET:[fd6b:7465:9::1]:5311/udp",
		"tcp6:[fd6b:7465:9::1]:5305":  "connect CONSUMES NET:[fd6b:7465:9::1]:5305/tcp",
		"tcp6:[2001:db8::11]:443":     "connect CONSUMES NET:[2001:db8::11]:443/tcp",
		"udpc6:[2001:db8::10]:443":    "connect CONSUMES NET:[2001:db8::10]:443/udp",
		"tcp6:[::ffff:192.0.2.1]:443": "connect CONSUMES NET:192.0.2.1:443/tcp",
	}
	ops := append(slices.Sorted(mapKeys(denied)), allowed...)
	got, _ := runOps(t, cg, ops...)
	for _, op := range allowed {
		// Past the hook the kernel may still find no route: anything
		// but the wall's EPERM.
		if got[op] == "" || got[op] == "EPERM" {
			t.Errorf("%s = %q, want it allowed", op, got[op])
		}
	}
	var wantEv []string
	for op, ev := range denied {
		if got[op] != "EPERM" {
			t.Errorf("%s = %q, want EPERM", op, got[op])
		}
		wantEv = append(wantEv, ev)
	}
	slices.Sort(wantEv)
	if gotEv := triples(collect(t, s, len(wantEv))); !slices.Equal(gotEv, wantEv) {
		t.Errorf("events:\n got %q\nwant %q", gotEv, wantEv)
	}
}
