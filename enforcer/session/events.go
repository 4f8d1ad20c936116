//go:build linux

package session

import (
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// emitter publishes a session's event records (Options.Events), stamped
// with its id, agent and mode; the zero emitter publishes nothing. Publish
// never blocks (eventlog.Hub), so the session's loop never waits for a
// reader.
type emitter struct{ sink eventlog.Sink }

func newEmitter(o Options, id, agent string, mode policy.Mode) emitter {
	if o.Events == nil {
		return emitter{}
	}
	return emitter{sink: eventlog.With(o.Events, eventlog.Record{Session: id, Agent: agent, Mode: string(mode)})}
}

func (e emitter) publish(r eventlog.Record) {
	if e.sink != nil {
		e.sink.Publish(r)
	}
}

func (e emitter) start(pid int, command []string) {
	e.publish(eventlog.Record{Kind: eventlog.KindSessionStart,
		Start: &eventlog.Start{PID: pid, Command: append([]string(nil), command...)}})
}

func (e emitter) kill(reason string, at time.Time) {
	e.publish(eventlog.Record{Kind: eventlog.KindKill, Time: at, Reason: reason})
}

func (e emitter) rollback(ops []vlog.RollbackOp) {
	if e.sink == nil {
		return
	}
	for _, op := range ops {
		e.publish(eventlog.Record{Kind: eventlog.KindRollback, Rollback: &eventlog.Rollback{
			Path: op.Path, Action: op.Action, OK: op.OK, Error: op.Error, Why: op.Why}})
	}
}

// end publishes how the session ended.
func (e emitter) end(res *Result, vl *vlog.Log) {
	if e.sink == nil {
		return
	}
	end := &eventlog.End{Exit: res.Exit.String(), Killed: res.Killed, Interrupted: res.Interrupted, LogPath: res.LogPath}
	if vl != nil {
		end.Violations = len(vl.Violations)
	}
	// The verification log's headline verdict, as klock log shows it.
	end.Verdict = "killed"
	if vl != nil {
		v, _ := vl.Headline()
		end.Verdict = strings.ToLower(v)
	}
	r := eventlog.Record{Kind: eventlog.KindSessionEnd, End: end}
	if res.Killed {
		r.Reason = res.Reason
	}
	e.publish(r)
}

// verdict publishes what the engine made of ev: a violation, a declared
// operation klock's wall refused, or (only when a reader asked) an
// observed triple.
func (e emitter) verdict(ev event.Event, v decide.Verdict) {
	if e.sink == nil {
		return
	}
	switch {
	case v.Err != nil:
		e.publish(eventlog.Record{Kind: eventlog.KindViolation, Time: ev.Time, Op: op(ev, v.Triple),
			Violation: &eventlog.Violation{Action: v.Action.String(), Error: v.Err.Error(), Needed: v.Err.Needed()}})
	case v.Refused:
		e.publish(eventlog.Record{Kind: eventlog.KindRefused, Time: ev.Time, Op: op(ev, v.Triple)})
	case v.Action == decide.ActionAllow && e.sink.WantsObserved():
		e.publish(eventlog.Record{Kind: eventlog.KindObserved, Time: ev.Time, Op: op(ev, v.Triple)})
	}
}

func op(ev event.Event, t policy.Triple) *eventlog.Op {
	return &eventlog.Op{Predicate: t.Predicate.String(), Object: t.ObjectString(), PID: ev.PID, Comm: ev.Comm,
		Syscall: ev.Syscall, Blocked: ev.Blocked}
}

// observe has the engine decide ev, publishes the verdict's record and
// acts on it.
func (s *running) observe(ev event.Event) decide.Verdict {
	if s.canaried && isCanary(ev) {
		return decide.Verdict{Action: decide.ActionAllow}
	}
	v := s.eng.Observe(ev)
	s.ev.verdict(ev, v)
	s.act(v)
	s.vetoExec(ev, v)
	return v
}

// vetoExec asks Options.ExecVeto about an exec the scope allowed and
// kills the session when it objects: a rule no triple can say (an
// interpreter the scope must let run once, as a script's, but never again).
func (s *running) vetoExec(ev event.Event, v decide.Verdict) {
	if s.execVeto == nil || ev.Triple.Type != policy.ObjProc || ev.Errno != 0 || ev.Blocked || v.Action != decide.ActionAllow {
		return
	}
	if why := s.execVeto(ev); why != "" {
		s.log.Error("killing the session", "exec", ev.Triple.Path, "why", why)
		s.kill(why, nil)
	}
}

// observeDNS decides a name the session's DNS proxy refused.
func (s *running) observeDNS(ev event.Event) {
	s.ev.publish(eventlog.Record{Kind: eventlog.KindDNSRefused, Time: ev.Time, Op: op(ev, ev.Triple)})
	s.observe(ev)
}
