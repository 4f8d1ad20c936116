package eventlog

import (
	"errors"
	"fmt"
	"time"
)

// With returns a Sink that fills the empty Source, Session, Agent, Mode
// and Owner of each record from base before s takes it: klockd stamps a
// session's records with its client's uid, a session its own id.
func With(s Sink, base Record) Sink {
	if s == nil {
		return nil
	}
	return stamped{s: s, base: base}
}

type stamped struct {
	s    Sink
	base Record
}

func (st stamped) WantsObserved() bool { return st.s.WantsObserved() }

func (st stamped) Publish(r Record) {
	b := &st.base
	for _, f := range [...]struct {
		dst *string
		src string
	}{
		{&r.Source, b.Source}, {&r.Session, b.Session}, {&r.Agent, b.Agent}, {&r.Mode, b.Mode}, {&r.Owner, b.Owner},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
	st.s.Publish(r)
}

// ErrBadSince: a --since value is neither a duration nor a time.
var ErrBadSince = errors.New("eventlog: bad since")

// ParseSince reads a --since value: a duration back from now ("10m") or
// an RFC 3339 time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%w: %q: a duration back from now is positive", ErrBadSince, s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%w: %q: want a duration (10m) or an RFC 3339 time (2026-01-02T15:04:05Z)", ErrBadSince, s)
}

// Tee returns a Sink that hands each record to every sink (nil ones
// skipped); nil when none is left.
func Tee(sinks ...Sink) Sink {
	var t tee
	for _, s := range sinks {
		if s != nil {
			t = append(t, s)
		}
	}
	switch len(t) {
	case 0:
		return nil
	case 1:
		return t[0]
	}
	return t
}

type tee []Sink

func (t tee) Publish(r Record) {
	for _, s := range t {
		s.Publish(r)
	}
}

func (t tee) WantsObserved() bool {
	for _, s := range t {
		if s.WantsObserved() {
			return true
		}
	}
	return false
}

// Guard reports whether k is a tool gateway's kind: the only kinds
// klockd takes from a peer (a peer cannot report a session's records).
func Guard(k Kind) bool {
	switch k {
	case KindApprovalAsked, KindApprovalGiven, KindBudgetRefused, KindToolDenied:
		return true
	}
	return false
}
