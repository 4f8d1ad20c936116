//go:build linux

package unixguard

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/bpfprog"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// Values shared with bpf/unixguard.bpf.c.
const (
	hookConnect = 1
	hookSendmsg = 2

	flagUnclean = 1 << 0
	flagNoCwd   = 1 << 1
	flagNoAddr  = 1 << 2
)

// hdrSize is the event header the kernel always sends (the path follows).
const hdrSize = int(unsafe.Offsetof(unixguardUgEvent{}.Path))

// lostPoll is how often the kernel's per-session loss counters are read.
const lostPoll = 100 * time.Millisecond

// handle decodes one ring buffer record and hands it to its session.
func (g *Guard) handle(rec *ringbuf.Record) {
	id, ev, ok := decode(rec.RawSample, time.Now())
	if !ok {
		g.logger.Error("unixguard: short event", "bytes", len(rec.RawSample))
		return
	}
	g.dispatch(id, ev)
}

// Sync returns once every refusal the kernel reported before the call is
// in its session's Events: a session ends by reading them (its log must
// hold the last refusal too).
func (g *Guard) Sync(ctx context.Context) error { return g.ring.Sync(ctx) }

// decode turns one kernel record into the refused triple: CONSUMES of the
// socket's path, the triple bpf-lsm and the tracepoints report for the
// same call.
func decode(b []byte, now time.Time) (uint64, event.Event, bool) {
	if len(b) < hdrSize {
		return 0, event.Event{}, false
	}
	// struct ug_event's header, field by field (the Go type carries the
	// whole 8 KiB path buffer).
	cgid := binary.NativeEndian.Uint64(b[0:])
	pid, tid := binary.NativeEndian.Uint32(b[8:]), binary.NativeEndian.Uint32(b[12:])
	n := binary.NativeEndian.Uint32(b[16:])
	hook, flags := b[20], b[21]
	var comm []byte
	for _, c := range b[24:40] {
		if c == 0 {
			break
		}
		comm = append(comm, c)
	}
	path := b[hdrSize:]
	if int(n) < len(path) {
		path = path[:n]
	}
	for len(path) > 0 && path[len(path)-1] == 0 {
		path = path[:len(path)-1]
	}
	p := string(path)
	if flags&flagUnclean != 0 && flags&flagNoCwd == 0 {
		// Refused for its "." or ".." components; the log names it the
		// way it reads (a label: the kernel never looked it up).
		p = filepath.Clean(p)
	}
	ev := event.Event{
		Time:    now,
		Source:  event.SourceCgroupUnix,
		PID:     pid,
		TID:     tid,
		Comm:    string(comm),
		Errno:   int32(unix.EPERM),
		Blocked: true,
		Triple:  policy.FileTriple(policy.Consumes, p),
		Syscall: "connect",
	}
	if hook == hookSendmsg {
		ev.Syscall = "sendmsg"
	}
	return cgid, ev, true
}

func (g *Guard) dispatch(id uint64, ev event.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[id]
	if s == nil || s.closed {
		g.logger.Debug("unixguard: event for a cgroup without session", "cgroup", id, "triple", ev.Triple.String())
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
		var v unixguardUgSession
		if err := g.objs.UgSessions.Lookup(id, &v); err == nil {
			s.losses.Kernel(v.Lost)
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
