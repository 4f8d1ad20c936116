package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/charge"
	"github.com/klocklabs/klock/guard/receipt"
)

// A budget ledger is one process's (package budget), so a sub-agent whose
// grants are delegated from its parent's (seed 003) cannot open the
// parent's ledger while the parent's gateway holds it. WithLedger lets
// that gateway serve its ledger to the sub-agent's gateway on the control
// socket: the child's grants are defined there, under the parent's, and
// every charge to them is decided in that ledger, so it is charged to both
// and receipted in the parent's chain. Only delegation goes through the
// socket: a grant defined there must have a parent, and only the grants,
// holds and receipts of such grants can be charged, settled or recorded.

// ErrNotDelegated: a ledger request over the socket for a grant that was
// not delegated through it (a root grant, or one defined before the
// parent's gateway restarted: the client defines it again and retries).
var ErrNotDelegated = errors.New("not a grant delegated through this gateway")

// WithLedger serves POST /ledger/{define,reserve,reconcile,release,record}
// for sub-agents' gateways (Client.Ledger).
func WithLedger(l charge.Ledger) ServeOption {
	return func(c *serveConfig) {
		c.ledger = &ledgerServer{l: l, grants: map[budget.Key]bool{}, holds: map[string]bool{}}
	}
}

type ledgerServer struct {
	l      charge.Ledger
	mu     sync.Mutex
	grants map[budget.Key]bool // defined through the socket (delegated)
	holds  map[string]bool     // reserved through the socket, open
}

// ledgerReply is a ledger call's answer: Error and Kind when it failed
// (Kind names the budget sentinel it wraps), Deny for a refusal.
type ledgerReply struct {
	Result json.RawMessage   `json:"result,omitempty"`
	Error  string            `json:"error,omitempty"`
	Kind   string            `json:"kind,omitempty"`
	Deny   *budget.DenyError `json:"deny,omitempty"`
}

// kinds are the sentinels that cross the socket, by name.
var kinds = []struct {
	name string
	err  error
}{{"denied", budget.ErrDenied}, {"widen", budget.ErrWiden}, {"unknown_grant", budget.ErrUnknownGrant},
	{"grant_changed", budget.ErrGrantChanged}, {"hold_not_open", budget.ErrHoldNotOpen}, {"ledger", budget.ErrLedger},
	{"bad_request", budget.ErrBadRequest}, {"not_delegated", ErrNotDelegated}}

func (s *ledgerServer) register(mux *http.ServeMux) {
	handle := func(op string, f func(ctx context.Context, body []byte) (any, error)) {
		mux.HandleFunc("POST /ledger/"+op, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
			// A decision is made even if the requester goes away: its
			// receipt must be written either way.
			v, err := f(context.WithoutCancel(r.Context()), body)
			var out ledgerReply
			if err != nil {
				out.Error, out.Kind = err.Error(), "internal"
				for _, k := range kinds {
					if errors.Is(err, k.err) {
						out.Kind = k.name
						break
					}
				}
				errors.As(err, &out.Deny)
			} else {
				out.Result, _ = json.Marshal(v)
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(out)
		})
	}
	handle("define", s.define)
	handle("reserve", s.reserve)
	handle("reconcile", s.reconcile)
	handle("release", s.release)
	handle("record", s.record)
}

func (s *ledgerServer) define(ctx context.Context, body []byte) (any, error) {
	var g budget.Grant
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, fmt.Errorf("%w: %v", budget.ErrBadRequest, err)
	}
	if g.Parent == nil {
		return nil, fmt.Errorf("%w: grant %s has no parent: the control socket defines delegated grants only", ErrNotDelegated, g.Key)
	}
	if err := s.l.Define(ctx, g); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.grants[g.Key] = true
	s.mu.Unlock()
	return struct{}{}, nil
}

func (s *ledgerServer) delegated(k budget.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.grants[k] {
		return fmt.Errorf("%w: %s", ErrNotDelegated, k)
	}
	return nil
}

func (s *ledgerServer) reserve(ctx context.Context, body []byte) (any, error) {
	var req budget.Request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("%w: %v", budget.ErrBadRequest, err)
	}
	if err := s.delegated(req.Key); err != nil {
		return nil, err
	}
	h, err := s.l.Reserve(ctx, req)
	if err == nil {
		s.mu.Lock()
		s.holds[h.ID] = true
		s.mu.Unlock()
	}
	return h, err
}

// settleReq is a reconcile's or release's body.
type settleReq struct {
	Hold   string        `json:"hold"`
	Settle budget.Settle `json:"settle"`
	Reason string        `json:"reason,omitempty"`
	Guard  string        `json:"guard,omitempty"`
}

// take reads a settle request and claims its hold: one reserved through
// the socket, settled once.
func (s *ledgerServer) take(body []byte) (settleReq, error) {
	var req settleReq
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("%w: %v", budget.ErrBadRequest, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.holds[req.Hold] {
		return req, fmt.Errorf("%w: hold %q was not reserved through this gateway (or is settled)", ErrNotDelegated, req.Hold)
	}
	delete(s.holds, req.Hold)
	return req, nil
}

func (s *ledgerServer) reconcile(ctx context.Context, body []byte) (any, error) {
	req, err := s.take(body)
	if err != nil {
		return nil, err
	}
	return s.l.Reconcile(ctx, req.Hold, req.Settle)
}

func (s *ledgerServer) release(ctx context.Context, body []byte) (any, error) {
	req, err := s.take(body)
	if err != nil {
		return nil, err
	}
	return s.l.Release(ctx, req.Hold, req.Reason, req.Guard)
}

func (s *ledgerServer) record(ctx context.Context, body []byte) (any, error) {
	var rc receipt.Receipt
	if err := json.Unmarshal(body, &rc); err != nil {
		return nil, fmt.Errorf("%w: %v", budget.ErrBadRequest, err)
	}
	s.mu.Lock()
	ok := false
	for k := range s.grants {
		ok = ok || k.Capability == rc.CapabilityID || k.Capability == rc.AgentID
	}
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: receipts of %s", ErrNotDelegated, rc.CapabilityID)
	}
	if err := s.l.Record(ctx, &rc); err != nil {
		return nil, err
	}
	return &rc, nil
}

// LedgerClient is a parent gateway's ledger as a sub-agent's gateway
// reaches it on the parent's control socket (WithLedger): a charge.Ledger
// whose errors wrap the budget's sentinels (a refusal is a
// *budget.DenyError with its receipt).
type LedgerClient struct {
	c       *Client
	mu      sync.Mutex
	defined []budget.Grant // defined again when the parent's gateway restarted
}

var _ charge.Ledger = (*LedgerClient)(nil)

// Ledger returns the ledger of the gateway on c's socket.
func (c *Client) Ledger() *LedgerClient { return &LedgerClient{c: c} }

// call posts one ledger request; a grant the parent no longer knows as
// delegated (it restarted) is defined again once, and the call retried.
func (l *LedgerClient) call(op string, body, out any) error {
	err := l.post(op, body, out)
	if !errors.Is(err, ErrNotDelegated) || op == "define" || op == "reconcile" || op == "release" {
		return err
	}
	l.mu.Lock()
	gs := append([]budget.Grant(nil), l.defined...)
	l.mu.Unlock()
	for _, g := range gs {
		if err := l.post("define", g, nil); err != nil {
			return err
		}
	}
	return l.post(op, body, out)
}

func (l *LedgerClient) post(op string, body, out any) error {
	var rep ledgerReply
	if err := l.c.do("POST", "/ledger/"+op, body, &rep); err != nil {
		return fmt.Errorf("%w: the parent gateway's ledger: %v", budget.ErrLedger, err)
	}
	if rep.Error == "" {
		if out == nil {
			return nil
		}
		return json.Unmarshal(rep.Result, out)
	}
	if rep.Deny != nil {
		return rep.Deny
	}
	for _, k := range kinds {
		if k.name == rep.Kind {
			return fmt.Errorf("%w (parent gateway: %s)", k.err, rep.Error)
		}
	}
	return fmt.Errorf("the parent gateway's ledger: %s", rep.Error)
}

// Define defines a delegated grant (g.Parent set) in the parent's ledger.
func (l *LedgerClient) Define(ctx context.Context, g budget.Grant) error {
	if err := l.call("define", g, nil); err != nil {
		return err
	}
	l.mu.Lock()
	l.defined = append(l.defined, g)
	l.mu.Unlock()
	return nil
}

// Reserve pre-charges in the parent's ledger.
func (l *LedgerClient) Reserve(ctx context.Context, req budget.Request) (budget.Hold, error) {
	var h budget.Hold
	return h, l.call("reserve", req, &h)
}

// Reconcile settles a hold reserved through the socket.
func (l *LedgerClient) Reconcile(ctx context.Context, holdID string, st budget.Settle) (budget.Settlement, error) {
	var out budget.Settlement
	return out, l.call("reconcile", settleReq{Hold: holdID, Settle: st}, &out)
}

// Release reverses a hold reserved through the socket.
func (l *LedgerClient) Release(ctx context.Context, holdID, reason, guard string) (*receipt.Receipt, error) {
	var out receipt.Receipt
	if err := l.call("release", settleReq{Hold: holdID, Reason: reason, Guard: guard}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Record writes a receipt of a delegated grant's agent into the parent's
// chain.
func (l *LedgerClient) Record(ctx context.Context, r *receipt.Receipt) error {
	return l.call("record", r, r)
}
