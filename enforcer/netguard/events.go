//go:build linux

package netguard

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/klocklabs/klock/enforcer/bpfprog"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// lostPoll is how often the kernel's per-session loss counters are read.
const lostPoll = 100 * time.Millisecond

// handle decodes one ring buffer record and hands it to its session.
func (g *Guard) handle(rec *ringbuf.Record) {
	var raw netguardNgEvent
	if len(rec.RawSample) < int(unsafe.Sizeof(raw)) {
		g.logger.Error("netguard: short event", "bytes", len(rec.RawSample))
		return
	}
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &raw); err != nil {
		g.logger.Error("netguard: decode event", "err", err)
		return
	}
	g.dispatch(raw.CgroupId, toEvent(&raw, time.Now()))
}

// Sync returns once every event the kernel reported before the call is in
// its session's Events: a session ends by reading them.
func (g *Guard) Sync(ctx context.Context) error { return g.ring.Sync(ctx) }

func (g *Guard) dispatch(id uint64, ev event.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[id]
	if s == nil || s.closed {
		g.orphans++
		g.logger.Debug("netguard: event for a cgroup without session", "cgroup", id, "triple", ev.Triple.String())
		return
	}
	if !s.events.Put(ev) {
		s.losses.Dropped()
		s.flushLostLocked()
	}
}

// pollLost moves the kernel's per-session loss counters to Session.Lost.
func (g *Guard) pollLost() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, s := range g.sessions {
		var n uint64
		if err := g.objs.NgLost.Lookup(id, &n); err == nil {
			s.losses.Kernel(n)
		}
		s.flushLostLocked()
	}
}

// flushLostLocked delivers the pending loss count, if any; g.mu is held.
func (s *Session) flushLostLocked() {
	if !s.closed {
		s.losses.Deliver(bpfprog.LostTo(s.lost))
	}
}

// toEvent maps one kernel record to the triple it denied (or, with
// ReportAllowed, allowed).
func toEvent(r *netguardNgEvent, now time.Time) event.Event {
	ev := event.Event{
		Time:    now,
		Source:  event.SourceCgroupNet,
		PID:     r.Pid,
		TID:     r.Tid,
		Comm:    comm(r.Comm),
		Errno:   int32(unix.EPERM),
		Blocked: true,
	}
	if r.Allowed != 0 {
		ev.Errno, ev.Blocked = 0, false
	}
	var proto policy.Proto
	switch r.Proto {
	case 1:
		proto = policy.ProtoTCP
	case 2:
		proto = policy.ProtoUDP
	}
	ap := netip.AddrPortFrom(decodeAddr(r.Addr, r.Family), r.Port)
	switch r.Hook {
	case hookConnect4, hookConnect6:
		ev.Syscall, ev.Triple = "connect", policy.NetTriple(policy.Consumes, ap, proto)
	case hookSendmsg4, hookSendmsg6:
		ev.Syscall, ev.Triple = "sendmsg", policy.NetTriple(policy.Consumes, ap, proto)
	case hookBind4, hookBind6:
		ev.Syscall, ev.Triple = "bind", policy.NetTriple(policy.Provides, ap, proto)
	case hookSockCreate:
		ev.Syscall, ev.Triple = "socket", policy.RawSocketTriple()
	}
	return ev
}

func comm(c [16]int8) string {
	b := make([]byte, 0, len(c))
	for _, x := range c {
		if x == 0 {
			break
		}
		b = append(b, byte(x))
	}
	return string(b)
}
