//go:build linux

package looprelay

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netns"
)

// stream is n deterministic pseudo-random bytes and their digest.
func stream(seed uint64, n int) ([]byte, [32]byte) {
	b := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{byte(seed)})
	rng.Read(b)
	return b, sha256.Sum256(b)
}

// paths runs f with the relay splicing (sockmap, which must load as
// root) and with it copying in user space.
func paths(t *testing.T, f func(t *testing.T, r *Relay, ns netns.NsHandle)) {
	testutil.RequirePrivileged(t)
	for _, p := range []string{"sockmap", "copy"} {
		t.Run(p, func(t *testing.T) {
			ns := testutil.NewNetNS(t)
			r := relayFor(t, ns)
			r.noSplice = p == "copy"
			if !strings.HasPrefix(r.Path(), p) {
				t.Fatalf("path %q, want %s", r.Path(), p)
			}
			f(t, r, ns)
		})
	}
}

// exchange: an agent in the namespace and a host loopback service, through
// the relay, each send the other several MB and half-close; order says
// who: "both" at once, or "service first" (its bytes and FIN before the
// agent sends anything, so queued before the flow is spliced). Each side
// checks the digest of what it read; the counters are exact; the flow is
// gone once both closed.
func TestExchangeIntact(t *testing.T) {
	for _, order := range []string{"both", "service first"} {
		t.Run(order, func(t *testing.T) {
			paths(t, func(t *testing.T, r *Relay, ns netns.NsHandle) {
				exchange(t, r, ns, order, 5<<20+123, 3<<20+7)
			})
		})
	}
}

func exchange(t *testing.T, r *Relay, ns netns.NsHandle, order string, up, down int) {
	upB, upSum := stream(1, up)
	downB, downSum := stream(2, down)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	svc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			svc <- err
			return
		}
		defer c.Close()
		read := make(chan [32]byte, 1)
		readAll := func() {
			h := sha256.New()
			io.Copy(h, c)
			read <- [32]byte(h.Sum(nil))
		}
		if order == "both" {
			go readAll()
		}
		if _, err := c.Write(downB); err != nil {
			svc <- err
			return
		}
		c.(*net.TCPConn).CloseWrite()
		if order != "both" {
			readAll()
		}
		if got := <-read; got != upSum {
			svc <- fmt.Errorf("the service read %x, want %x (agent to service)", got[:6], upSum[:6])
			return
		}
		svc <- nil
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := r.Add("peer", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		t.Fatal(err)
	}
	err = testutil.InNetNS(ns, func() error {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(lo, port).String())
		if err != nil {
			return err
		}
		defer c.Close()
		read := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(c)
			read <- b
		}()
		var got []byte
		if order != "both" {
			got = <-read
		}
		if _, err := c.Write(upB); err != nil {
			return err
		}
		c.(*net.TCPConn).CloseWrite()
		if order == "both" {
			got = <-read
		}
		if sha256.Sum256(got) != downSum {
			return fmt.Errorf("the agent read %d bytes, want %d (service to agent), digest differs: %v", len(got), down, bytes.Equal(got, downB))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-svc; err != nil {
		t.Fatal(err)
	}
	waitFlowsGone(t, r)
	c := r.Counters()["peer"]
	if c.OutBytes != uint64(up) || c.InBytes != uint64(down) || c.OutPackets == 0 || c.InPackets == 0 {
		t.Errorf("counters %+v, want %d bytes out, %d in", c, up, down)
	}
	t.Logf("%s: %+v", r.Path(), c)
}

// waitFlowsGone waits for the relay to end its flows (both sides closed),
// and checks that none is left in the kernel's map.
func waitFlowsGone(t *testing.T, r *Relay) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.spliced) + len(r.flows)
		r.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d flow end(s) still open after both sides closed", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.spl == nil {
		return
	}
	var k uint64
	var v looprelayLrFlow
	it := r.spl.objs.LrFlows.Iterate()
	n := 0
	for it.Next(&k, &v) {
		n++
	}
	if n != 0 {
		t.Errorf("%d socket(s) left in the flow map", n)
	}
}
