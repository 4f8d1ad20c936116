package budget

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy/money"
)

// Grant is a grant to define in the ledger.
type Grant struct {
	Key    Key
	Limits Limits
	Tool   string
	Server string
	// Parent, when set, makes this a delegated grant: its limits must be
	// within the parent's (else ErrWiden), and every charge to it is also
	// charged to the parent and its ancestors in the same transaction.
	Parent *Key
	// RootHolder names who holds the root budget (defaults to the
	// capability id of the root grant).
	RootHolder string
}

// Request asks for a pre-charge before dispatch.
type Request struct {
	Key Key
	// Cost is the worst case to reserve. A zero Amount (no currency)
	// reserves the grant's max_cost_per_invocation (seed 003's pessimistic
	// pre-charge), or nothing when the grant has none.
	Cost money.Amount
	// Tool and Server default to the grant's.
	Tool, Server string
	// Parameters of the call, recorded (with their hash) in the receipt.
	Parameters json.RawMessage
	// Cost metadata (Token Guard estimate, envelope) for the receipt.
	CostMeta *receipt.Cost
	// PolicyHash is the hash of the manifest the call was decided under
	// (the receipt's policy_hash); Evidence is added to the receipt's.
	PolicyHash string
	Evidence   []receipt.Evidence
	// AgentID names the agent whose call it is in its receipts (default
	// the store's, WithAgent): a sub-agent charging its parent's ledger
	// through the parent's gateway names itself.
	AgentID string
}

// Hold is a granted pre-charge.
type Hold struct {
	ID       string
	Key      Key
	Reserved money.Amount // in the grant's currency
	// Receipt is the allow receipt (unsigned until it reaches the chain;
	// the chain's copy carries seq, prev and signature).
	Receipt *receipt.Receipt
}

// Settle is the actual cost of a dispatched call.
type Settle struct {
	Actual money.Amount
	// Breakdown is the tool's itemized cost (opaque JSON, copied through).
	Breakdown        json.RawMessage
	PaymentReference string
	CostMeta         *receipt.Cost
	// PolicyHash and ContentHash are the receipt's policy_hash (the
	// manifest's) and content_hash (the call's arguments and result, keyed
	// in confidential mode); Evidence is added to the receipt's (the
	// cost's source, for one).
	PolicyHash, ContentHash string
	Evidence                []receipt.Evidence
}

// Settlement is the outcome of Reconcile.
type Settlement struct {
	Charged money.Amount // in the grant's currency
	Credit  uint64       // given back (reserved - actual)
	Overrun uint64       // charged beyond the reservation (status failed)
	Status  string       // receipt.Settled or receipt.Failed
	Receipt *receipt.Receipt
}

// Usage is a grant's running state.
type Usage struct {
	Key         Key
	Limits      Limits
	Invocations uint64
	Charged     money.Amount
	OpenHolds   int
}

// Authorizer is the budget seam the tool gateway and the metering proxy
// call: reserve the worst case before dispatch, then either reconcile with
// the actual cost or release the hold when a later check denies the call.
type Authorizer interface {
	Reserve(ctx context.Context, req Request) (Hold, error)
	Reconcile(ctx context.Context, holdID string, s Settle) (Settlement, error)
	Release(ctx context.Context, holdID, reason, guard string) (*receipt.Receipt, error)
	Record(ctx context.Context, r *receipt.Receipt) error
}

var _ Authorizer = (*Store)(nil)

// Define adds a grant to the ledger (idempotent for identical limits).
func (s *Store) Define(ctx context.Context, g Grant) error {
	return s.submit(ctx, &op{kind: opDefine, grant: g}).err
}

// Reserve pre-charges the worst case, checking max_cost_per_invocation,
// max_total_cost and max_invocations of the grant and every ancestor
// atomically. A refusal is a *DenyError (errors.Is ErrDenied) carrying its
// receipt; the refusal is durable like an allowance.
func (s *Store) Reserve(ctx context.Context, req Request) (Hold, error) {
	r := s.submit(ctx, &op{kind: opReserve, req: req})
	return r.hold, r.err
}

// Reconcile settles an open hold with the actual cost: a cheaper actual is
// credited back; a dearer one is charged in full and recorded as an overrun
// with settlement status failed.
func (s *Store) Reconcile(ctx context.Context, holdID string, st Settle) (Settlement, error) {
	r := s.submit(ctx, &op{kind: opReconcile, holdID: holdID, settle: st})
	return r.settlement, r.err
}

// Release fully reverses an open hold (the call never ran: a later guard
// denied it, or dispatch failed), recording reason and the denying guard.
func (s *Store) Release(ctx context.Context, holdID, reason, guard string) (*receipt.Receipt, error) {
	r := s.submit(ctx, &op{kind: opRelease, holdID: holdID, reason: reason, guard: guard})
	return r.receipt, r.err
}

// Record writes a receipt for a decision that moves no money (a Token
// Guard refusal, a metering note) into the same ledger-ordered chain.
func (s *Store) Record(ctx context.Context, rc *receipt.Receipt) error {
	return s.submit(ctx, &op{kind: opRecord, rec: rc}).err
}

// Usage reads a grant's committed state.
func (s *Store) Usage(ctx context.Context, k Key) (Usage, error) {
	if s.ap != nil {
		// Open holds are counted in SQLite: wait for the applier to
		// have every batch decided so far there.
		s.mu.Lock()
		seq := s.jseq
		s.mu.Unlock()
		if err := s.waitApplied(seq); err != nil {
			return Usage{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.grants[k]
	if !ok {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return Usage{}, ledgerErr(s.path, "read", err)
		}
		defer tx.Rollback()
		if g, err = loadGrant(tx, k); err != nil {
			return Usage{}, ledgerErr(s.path, "read", err)
		}
		if g == nil {
			return Usage{}, fmt.Errorf("%w: %s", ErrUnknownGrant, k)
		}
		tx.Rollback()
	}
	u := Usage{Key: k, Limits: g.limits, Invocations: g.invocations, Charged: money.Amount{Units: g.charged, Currency: g.limits.Currency}}
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM holds WHERE capability = ? AND grant_index = ? AND open`, k.Capability, k.Grant).Scan(&u.OpenHolds)
	if err != nil {
		return Usage{}, ledgerErr(s.path, "read", err)
	}
	return u, nil
}
