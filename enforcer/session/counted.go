//go:build linux

package session

import (
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// countReadsIn is the directory below which the tracepoint backend's
// kernel side counts the reads one intent allows there whole, instead of
// reporting each (observe.Watch.CountBelow): the workdir, which a
// strict kill restores whole, so no read there is a rollback root of its
// own (RollbackRoots). Empty, and every operation reported, with
// Options.RecordAll (and so --learn, which learns from each object), in
// a container (its paths are mapped to the host's), under bpf-lsm (which
// counts on its own) and without a workdir.
func (r *runner) countReadsIn(be *backends) string {
	if r.o.RecordAll || r.o.Container != nil || be.watch == nil || be.lsms != nil || r.m.Workdir == "" || !filepath.IsAbs(r.m.Workdir) {
		return ""
	}
	return filepath.Clean(r.m.Workdir)
}

// countFrom makes the kernel count the reads below countIn from r on, a
// read there the engine just allowed (v), when one intent allows every
// read below it (decide.Engine.CountFrom). Every other operation there,
// writes and violations included, is still reported one by one.
func (s *running) countFrom(r observe.Record, ev event.Event, v decide.Verdict) {
	if s.countIn == "" || s.counting || !observe.Countable(r) || !strings.HasPrefix(ev.Triple.Path, s.countIn+"/") {
		return
	}
	if s.priv != nil && policy.InTmp(ev.Triple.Path) {
		return // the agent's own /tmp, not the host's at that name
	}
	if !s.eng.CountFrom(ev, v, s.countIn) {
		return
	}
	ok, err := s.be.watch.CountBelow(r, s.countIn)
	if err != nil {
		s.log.Warn("observer: count the reads below the workdir", "error", err)
	}
	s.counting = ok
}

// takeCounted hands what the kernel counted to the engine and stops the
// counting: at the end, after the observer's Sync, and when the scope
// grew (an amendment), so that no read counted under one ruleset stands
// under another.
func (s *running) takeCounted() {
	if !s.counting {
		return
	}
	s.counting = false
	c, ok, err := s.be.watch.TakeCounted()
	if err != nil {
		s.log.Warn("observer: counted reads", "error", err)
	}
	if ok {
		s.eng.Counted(c.Dir, c.N)
	}
}

// recording is how the log's allowed operations were recorded
// (vlog.Log.Recording), for a session the tracepoint backend watched.
func (s *running) recording() string {
	switch {
	case s.be == nil || s.be.watch == nil || s.be.lsms != nil:
		return ""
	case s.countIn != "":
		return vlog.RecordCounted
	}
	return vlog.RecordAll
}
