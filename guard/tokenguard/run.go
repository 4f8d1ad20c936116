package tokenguard

import (
	"errors"
	"sync"
	"time"

	"github.com/klocklabs/klock/policy/money"
)

// KCC's cost envelope bounds an agent invocation, and an invocation makes
// many model calls: holding each HTTP call to the whole envelope would let
// ten calls spend ten envelopes. Runs keeps what each invocation (a run id
// the agent's harness sends, or the operator fixes) has used so far, and
// when it started, so the guard judges every call against what is left of
// the invocation's envelope and cancels it at the invocation's latency
// limit.

// ErrLatency is the cause of a call cancelled at the envelope's
// max_latency_ms.
var ErrLatency = errors.New("max_latency_ms reached")

// runIdle is how long a run nobody used is remembered.
const runIdle = 24 * time.Hour

// Runs tracks agent invocations. Safe for concurrent use.
type Runs struct {
	mu  sync.Mutex
	m   map[string]*runState
	now func() time.Time
}

type runState struct {
	started, seen time.Time
	used          Usage
}

// NewRuns returns an empty tracker.
func NewRuns() *Runs { return &Runs{m: map[string]*runState{}, now: time.Now} }

// Begin returns what run id has used so far and when it started, starting
// it now when it is new.
func (r *Runs) Begin(id string) (Usage, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for k, s := range r.m {
		if now.Sub(s.seen) > runIdle {
			delete(r.m, k)
		}
	}
	s := r.m[id]
	if s == nil {
		s = &runState{started: now}
		r.m[id] = s
	}
	s.seen = now
	u := s.used
	if u.Cost != nil {
		c := *u.Cost
		u.Cost = &c
	}
	return u, s.started
}

// Add counts one finished call's usage (its actual, or its reservation when
// the actual is unknown: never less than it may have cost) against run id.
func (r *Runs) Add(id string, u Usage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m[id]
	if s == nil {
		s = &runState{started: r.now()}
		r.m[id] = s
	}
	s.seen = r.now()
	s.used.TokensIn += max(u.TokensIn, 0)
	s.used.TokensOut += max(u.TokensOut, 0)
	if u.Cost != nil {
		if s.used.Cost == nil {
			c := money.Amount{Currency: u.Cost.Currency}
			s.used.Cost = &c
		}
		if s.used.Cost.Currency == u.Cost.Currency {
			s.used.Cost.Units += u.Cost.Units
		}
	}
}
