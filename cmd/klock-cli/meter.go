package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/guard/approval/etcdqueue"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/charge"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/meter"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

// meterOptions are klock meter's flags; run is the command.
type meterOptions struct {
	manifest, listen, upstream, receiptsFlag, pricesFile, ratesFile, keyFile, session, grantTool, stateDir, runID string
	approvalWait                                                                                                  time.Duration
	tf                                                                                                            trustFlags
}

func newMeter() *cobra.Command {
	o := &meterOptions{}
	c := &cobra.Command{
		Use:   "meter -m FILE --listen ADDR --upstream URL",
		Short: "Meter an agent's model calls: Token Guard, budget, signed receipts",
		Long: `Meter runs a reverse proxy for OpenAI-style (/v1/chat/completions,
/v1/responses) and Anthropic-style (/v1/messages) model APIs, streaming
included. Point the agent's API base URL at --listen. For every call it:

  - refuses it when the estimate exceeds a max_* of the cost_envelope; an
    estimate above 80 % of a max waits for a human in the approval queue
    (klock approvals, klock approve ID, klock deny ID) shared with klock mcp:
    approved, it proceeds; denied or past hitl.approval_timeout_seconds
    (default 5 min), it is refused (approval_denied, approval_timeout); still
    pending after --approval-wait, it is refused with the retryable
    approval_pending and the same request retried waits on the same approval;
  - holds the envelope per agent invocation, not per HTTP call: calls that
    send the same X-Klock-Run-Id header (else --run-id) share one envelope,
    each judged with what the invocation's earlier calls used; without
    either, each call is its own invocation;
  - cancels a call when its invocation reaches max_latency_ms (the agent
    gets a typed "timeout"; the reservation stays charged);
  - caps the output tokens to the envelope and the remaining budget;
  - pre-charges the worst case against the grant whose tool is --grant
    (default "model"; without one, the envelope's max_cost per call);
  - relays the response (SSE event by event), cuts a stream that crosses
    the budget, and reconciles with the usage the API reported;
  - writes a signed, hash-chained receipt for every decision.

Prices come from a YAML table in integer micro-units per token (see
examples/prices.yaml); without --prices, <workdir>/.klock/prices.yaml.
State lives in the receipts directory (default <workdir>/.klock/receipts/):
ledger.db (the budget ledger, SQLite; ledger.db.decisions is its decision
journal), receipts.jsonl (the receipt chain),
receipts.key and receipts.pub (the signing key, created on first use).
Budgets persist across restarts for the same --session.`,
		Example: `  klock meter -m examples/manifests/refund-agent.yaml --prices examples/prices.yaml \
      --listen 127.0.0.1:8411 --upstream https://api.openai.example --receipts /tmp/receipts
  OPENAI_BASE_URL=http://127.0.0.1:8411/v1 ./agent
  klock approvals                 # a call near a max waits here
  klock approve ap_0123456789ab
  klock receipts verify /tmp/receipts
  klock report /tmp/receipts`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	c.Flags().StringVarP(&o.manifest, "manifest", "m", "", "the agent's manifest (its cost_envelope and grants apply)")
	c.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8411", "address to serve the proxy on")
	c.Flags().StringVar(&o.upstream, "upstream", "", "the model API base URL, e.g. https://api.openai.com")
	c.Flags().StringVar(&o.receiptsFlag, "receipts", "", "receipts and ledger directory (default <workdir>/.klock/receipts)")
	c.Flags().StringVar(&o.pricesFile, "prices", "", "price table YAML (default <workdir>/.klock/prices.yaml)")
	c.Flags().StringVar(&o.ratesFile, "rates", "", "rates file for a price table in another currency than the grant's: each rate with its source and time, recorded in receipts (default: the manifest's rates:)")
	c.Flags().StringVar(&o.keyFile, "key", "", "ed25519 private key for receipts (default: receipts.key in the receipts directory, created if missing)")
	c.Flags().StringVar(&o.session, "session", "", "capability/session id budgets are kept under (default: agent.id)")
	c.Flags().StringVar(&o.grantTool, "grant", "model", "the manifest grant (by tool name) model calls are charged to")
	c.Flags().StringVar(&o.runID, "run-id", "", "the agent invocation calls without an X-Klock-Run-Id header belong to (the envelope holds the invocation)")
	c.Flags().StringVar(&o.stateDir, "state-dir", "", "where the approval queue lives (default as klock mcp: $KLOCK_STATE_DIR, /var/lib/klock as root, else ~/.local/state/klock)")
	c.Flags().DurationVar(&o.approvalWait, "approval-wait", 0, "how long one call blocks on a pending approval before it is refused as approval_pending (default: the approval timeout)")
	o.tf.register(c)
	_ = c.MarkFlagRequired("manifest")
	_ = c.MarkFlagRequired("upstream")
	return c
}

// run sets up the Token Guard, the price table and the budget ledger from
// the manifest and serves the metering proxy until SIGINT or SIGTERM, then
// flushes the ledger.
func (o *meterOptions) run(cmd *cobra.Command, _ []string) error {
	m, data, err := o.tf.load(o.manifest)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	up, err := url.Parse(o.upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return &exitError{code: exitUsage, err: fmt.Errorf("--upstream %q: want an http(s) URL such as https://api.openai.com", o.upstream)}
	}
	rdir, err := receiptsDir(m, o.manifest, o.receiptsFlag)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	prices, err := o.loadPrices(m)
	if err != nil {
		return err
	}
	guard, err := tokenguard.New(m.CostEnvelope)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	if o.session == "" {
		o.session = m.Agent.ID
	}
	grant, err := meterGrant(m, o.session, o.grantTool, prices.Currency)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	policyHash, err := charge.PolicyHash(data)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	store, err := openLedger(m, rdir, o.keyFile, o.ratesFile, policyHash)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Define(cmd.Context(), grant); err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	approver, err := costApprover(m, o.stateDir, o.approvalWait)
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	px, err := meter.New(meter.Config{Upstream: up, Budget: store, Key: grant.Key, Guard: guard, Prices: prices,
		AgentID: m.Agent.ID, PolicyHash: policyHash}, meter.WithLogger(log), meter.WithApprover(approver), meter.WithRunID(o.runID))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("klock meter: listening", "addr", ln.Addr().String(), "upstream", up.String(), "grant", grant.Key.String(),
		"receipts", rdir)
	if err := serveUntilDone(ctx, ln, px); err != nil {
		return err
	}
	return store.Flush(context.Background())
}

// loadPrices reads the price table: --prices, else the workdir's
// .klock/prices.yaml.
func (o *meterOptions) loadPrices(m *policy.Manifest) (*meter.Prices, error) {
	if o.pricesFile == "" {
		if m.Workdir == "" {
			return nil, &exitError{code: exitUsage, err: errors.New("pass --prices FILE (a price table, see examples/prices.yaml)")}
		}
		o.pricesFile = filepath.Join(m.Workdir, ".klock", "prices.yaml")
	}
	prices, err := meter.LoadPrices(o.pricesFile)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	return prices, nil
}

// serveUntilDone serves h on ln until ctx is done (a signal), then shuts
// the server down, giving the calls in flight 10 seconds to finish.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// costApprover opens the shared approval queue for the Token Guard's
// escalations: a meter that could not ask a human refuses to start.
func costApprover(m *policy.Manifest, stateDir string, wait time.Duration) (*approval.CostApprover, error) {
	if stateDir == "" {
		stateDir = gateway.StateDir()
	}
	// The fleet's queue when the host is in one; its client lives as long
	// as the meter.
	q, _, err := etcdqueue.OpenHost(gateway.Layout{Dir: stateDir, Agent: m.Agent.ID}.Approvals())
	if err != nil {
		return nil, fmt.Errorf("refusing to start without the approval queue (--state-dir): %w", err)
	}
	timeout := gateway.DefaultApprovalTimeout
	if s := m.HITL.ApprovalTimeoutSeconds; s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	return &approval.CostApprover{Store: q, Agent: m.Agent.ID, Timeout: timeout, Wait: wait}, nil
}

// meterGrant is the manifest grant named tool, or (when there is none) a
// grant holding each call to the envelope's max_cost.
func meterGrant(m *policy.Manifest, session, tool, currency string) (budget.Grant, error) {
	for i, g := range m.Grants {
		if g.Tool == tool {
			l, err := budget.FromGrant(g, currency)
			if err != nil {
				return budget.Grant{}, err
			}
			// A delegated agent's model grant is its parent's child too.
			parent, err := charge.ParentGrant(m)
			if err != nil {
				return budget.Grant{}, err
			}
			return budget.Grant{Key: budget.Key{Capability: session, Grant: uint32(i)}, Limits: l, Tool: g.Tool, Server: g.ServerID, Parent: parent}, nil
		}
	}
	l := budget.Limits{Currency: currency}
	if mc := m.CostEnvelope.MaxCost; mc != nil && mc.Currency == currency {
		u := mc.Units
		l.PerInvocation = &u
	}
	return budget.Grant{Key: budget.Key{Capability: session, Grant: uint32(len(m.Grants))}, Limits: l, Tool: tool}, nil
}

// receiptKey reads the signing key, creating receipts.key/.pub in dir on
// first use.
func receiptKey(dir, keyFile string) (ed25519.PrivateKey, error) {
	if keyFile == "" {
		keyFile = filepath.Join(dir, "receipts.key")
		if _, err := os.Stat(keyFile); errors.Is(err, os.ErrNotExist) {
			priv, pub, err := policy.GenerateKey()
			if err != nil {
				return nil, err
			}
			if err := writeNew(keyFile, priv, 0o600, false); err != nil {
				return nil, err
			}
			if err := writeNew(filepath.Join(dir, "receipts.pub"), pub, 0o644, true); err != nil {
				return nil, err
			}
		}
	}
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("read receipt key: %w", err)}
	}
	priv, err := policy.ParsePrivateKey(data)
	if err != nil {
		return nil, &exitError{code: exitInvalid, err: err}
	}
	return priv, nil
}
