package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/idem"
	"github.com/klocklabs/klock/guard/ratestate"
	"github.com/klocklabs/klock/policy"
)

// StateDir is where gateways keep their durable state by default:
// $KLOCK_STATE_DIR, else /var/lib/klock for root, else
// $XDG_STATE_HOME/klock (~/.local/state/klock).
func StateDir() string {
	if d := os.Getenv("KLOCK_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/klock"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "klock")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "klock")
}

// Layout names the files of one agent's gateway under a state directory.
// The approval queue is shared by every agent on the host, so one
// `klock approvals` shows them all.
type Layout struct {
	Dir, Agent string
	// Queue, when set, is the approval queue instead of the directory
	// Approvals(): a fleet's on etcd, shared by every host's gateways.
	Queue approval.Queue
}

func (l Layout) Approvals() string { return filepath.Join(l.Dir, "approvals") }
func (l Layout) agentDir() string  { return filepath.Join(l.Dir, "gateway", l.Agent) }
func (l Layout) Audit() string     { return filepath.Join(l.agentDir(), "audit.jsonl") }
func (l Layout) Idem() string      { return filepath.Join(l.agentDir(), "idempotency.jsonl") }
func (l Layout) Control() string   { return filepath.Join(l.agentDir(), "control.sock") }

// AuditKey is the deployment's secret for confidential digests: one per
// state directory, so digests compare across its agents and restarts.
func (l Layout) AuditKey() string { return filepath.Join(l.Dir, audit.KeyFile) }

// Limits is the rate-limit and governance state (SQLite): counters and
// operators' changes outlive a restart.
func (l Layout) Limits() string { return filepath.Join(l.agentDir(), "limits.db") }

// Stores are the durable pieces a gateway opened; Close closes them.
type Stores struct {
	Audit     *audit.Log
	Approvals approval.Queue
	Idem      *idem.Store
	// AuditPath is the audit log's file (klock audit verify reads it).
	AuditPath string
	Limits    *ratestate.Store
	rb        *rbJournal
}

// Close closes the audit log and the idempotency store.
func (s *Stores) Close() {
	if s.Audit != nil {
		s.Audit.Close()
	}
	if s.Idem != nil {
		s.Idem.Close()
	}
	if s.Limits != nil {
		s.Limits.Close()
	}
	s.rb.close()
}

// Open compiles m and opens its durable stores; auditPath overrides the
// layout's audit log when not empty. Any store that cannot be opened stops
// the gateway from starting, with the path and the fix in the error.
func Open(m *policy.Manifest, l Layout, auditPath string, checkOpts []check.Option, opts ...Option) (*Gateway, *Stores, error) {
	st := &Stores{}
	var err error
	if st.Limits, err = ratestate.Open(l.Limits()); err != nil {
		return nil, nil, fmt.Errorf("refusing to start without the rate-limit state (--state-dir): %w", err)
	}
	p, err := check.New(m, append(checkOpts[:len(checkOpts):len(checkOpts)], check.WithState(st.Limits))...)
	if errors.Is(err, check.ErrState) {
		st.Close()
		return nil, nil, fmt.Errorf("refusing to start without the rate-limit state (--state-dir): %w", err)
	}
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("compile the manifest's tool contracts: %w", err)
	}
	if auditPath == "" {
		auditPath = l.Audit()
	}
	st.AuditPath = auditPath
	// Opening the log merges back what its dispatch records say the
	// counters were: their own store does not flush before a dispatch.
	merge, mergeErr := mergeCounters(p), error(nil)
	replay := audit.WithReplay(m.Agent.ID, func(r *audit.Record) error {
		if mergeErr == nil {
			mergeErr = merge(r)
		}
		return nil
	})
	if st.Audit, err = audit.Open(auditPath, audit.WithKeyFile(l.AuditKey()), replay); err == nil && mergeErr != nil {
		st.Close()
		return nil, nil, fmt.Errorf("refusing to start without the rate-limit state (--state-dir): the counters of the calls the audit log records as dispatched could not be put back: %w", mergeErr)
	}
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("refusing to start without an audit log: %w", err)
	}
	if st.Approvals = l.Queue; st.Approvals == nil {
		if st.Approvals, err = approval.Open(l.Approvals()); err != nil {
			st.Close()
			return nil, nil, fmt.Errorf("refusing to start without an approval queue (--state-dir): %w", err)
		}
	}
	if st.Idem, err = idem.Open(l.Idem()); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("refusing to start without the idempotency store (--state-dir): %w", err)
	}
	j, open, err := openRBJournal(RollbackJournal(auditPath))
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("refusing to start without the rollback journal (beside the audit log): %w", err)
	}
	st.rb = j
	g, err := New(m, p, st.Audit, st.Approvals, st.Idem, opts...)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	g.rb.journal, g.rb.run = j, open
	// What expired before the restart still decides the run's calls.
	for run, list := range open {
		for _, p := range list {
			if p.expired {
				g.p.Irreversible(p.tool, run, p.expiredWhy())
			}
		}
	}
	return g, st, nil
}
