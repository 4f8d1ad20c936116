//go:build linux

package session

import (
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/oci"
	"github.com/klocklabs/klock/policy"
)

func newRunningFor(ctr *Container) *running {
	return &running{proc: &launch.Process{Pid: 100}, ctr: ctr, stageExecs: ctr.stageExecs(),
		execs: 2, forked: map[uint32]bool{}, entrants: map[uint32]int{}}
}

func read(pid uint32, p string) event.Event {
	return event.Event{PID: pid, Triple: policy.FileTriple(policy.Consumes, p)}
}

func execOf(pid uint32, p string) event.Event {
	return event.Event{PID: pid, Triple: policy.Triple{Type: policy.ObjProc, Path: p, Predicate: policy.Provides}}
}

// TestEntrantsAreTheRuntimesUntilStage2Execs: a process that joined an
// adopted container from outside (no fork of it seen: runc exec) is the
// runtime's and stage 2's until stage 2 execs its command; the command's
// exec and what follows are judged. A first exec that is not stage 2's
// ends it at once; a forked process, the first process, a process seen
// after records were lost, and any process of a session klock launched
// are judged from the start.
func TestEntrantsAreTheRuntimesUntilStage2Execs(t *testing.T) {
	type step struct {
		ev     event.Event
		judged bool
	}
	for _, c := range []struct {
		name  string
		ctr   *Container
		setup func(s *running)
		steps []step
	}{
		{"runtime mode", &Container{WallFile: "/w"}, nil, []step{
			{read(200, "/etc/passwd"), false}, {execOf(200, oci.Stage2Path), false}, {read(200, oci.WallPath), false},
			{execOf(200, "/bin/sh"), true}, {read(200, "/workspace/x"), true}, {execOf(200, "/bin/ls"), true},
		}},
		{"not stage 2 first", &Container{WallFile: "/w"}, nil, []step{
			{read(200, "/etc/passwd"), false}, {execOf(200, "/bin/sh"), true}, {read(200, oci.WallPath), true},
		}},
		{"a failed exec does not count", &Container{WallFile: "/w"}, nil, []step{
			{event.Event{PID: 200, Errno: 2, Triple: policy.Triple{Type: policy.ObjProc, Path: "/nope", Predicate: policy.Provides}}, false},
			{execOf(200, oci.Stage2Path), false}, {execOf(200, "/bin/sh"), true},
		}},
		{"hook mode", &Container{}, nil, []step{
			{read(200, "/etc/passwd"), false}, {execOf(200, "/bin/sh"), true}, {read(200, "/x"), true},
		}},
		{"forked", &Container{WallFile: "/w"}, func(s *running) {
			s.record(observe.Record{Kind: observe.KindFork, PPID: 100, Event: event.Event{PID: 300}})
		}, []step{{read(300, "/etc/passwd"), true}, {execOf(300, oci.Stage2Path), true}}},
		{"the first process", &Container{WallFile: "/w"}, nil, []step{{read(100, "/etc/passwd"), true}}},
		{"after a loss", &Container{WallFile: "/w"}, func(s *running) { s.lostAny = true },
			[]step{{read(200, "/etc/passwd"), true}, {execOf(200, oci.Stage2Path), true}}},
		{"pid reused after an exit", &Container{WallFile: "/w"}, func(s *running) {
			s.record(observe.Record{Kind: observe.KindFork, PPID: 100, Event: event.Event{PID: 200}})
			s.record(observe.Record{Kind: observe.KindExit, Event: event.Event{PID: 200}})
		}, []step{{read(200, "/etc/passwd"), false}, {execOf(200, oci.Stage2Path), false}, {execOf(200, "/bin/sh"), true}}},
	} {
		s := newRunningFor(c.ctr)
		if c.setup != nil {
			c.setup(s)
		}
		for i, st := range c.steps {
			judged := s.agentStarted(st.ev) && !s.entering(st.ev)
			if judged != st.judged {
				t.Fatalf("%s: step %d (%s by %d): judged %v, want %v", c.name, i, st.ev.Triple, st.ev.PID, judged, st.judged)
			}
		}
	}
	// klock run: nothing joins from outside.
	s := &running{proc: &launch.Process{Pid: 100}, stageExecs: 1, execs: 1}
	if !s.agentStarted(read(200, "/x")) || s.entering(read(200, "/x")) {
		t.Fatalf("klock run: a process of the session not judged")
	}
}
