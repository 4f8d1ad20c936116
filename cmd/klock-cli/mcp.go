package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/charge"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/control"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/mcpproxy"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

// gatewayFlags are the flags of a gateway command (klock mcp; the HTTP
// tool proxy will share them).
type gatewayFlags struct {
	manifest, stateDir, auditPath, runID, control string
	receipts, receiptKey, session, rates          string
	parentGrant, parentGateway                    string
	context                                       []string
	approvalWait, leaseWait                       time.Duration
	confidential                                  bool
	trust                                         trustFlags
	events                                        eventsFile
	data                                          []byte // the manifest's bytes as admitted
	// leases is the store the gateway's calls take their leases from,
	// which the plugin sessions they run share (set by open).
	leases lease.Store
}

func (f *gatewayFlags) register(c *cobra.Command) {
	c.Flags().StringVarP(&f.manifest, "manifest", "m", "", "the agent's manifest (required): its declared_tools are the contract")
	c.Flags().StringVar(&f.stateDir, "state-dir", "", "durable gateway state: approvals, audit, idempotency (default $KLOCK_STATE_DIR, /var/lib/klock as root, else ~/.local/state/klock)")
	c.Flags().StringVar(&f.auditPath, "audit", "", "audit log file (default <state-dir>/gateway/<agent>/audit.jsonl)")
	c.Flags().StringArrayVar(&f.context, "context", nil, "call context KEY=VALUE for must_match bindings and unsupervised_if (repeatable); dotted keys nest: task.customer_id=c_42, account.tier=pro")
	c.Flags().StringVar(&f.runID, "run-id", "", "run id for per_run limits and the audit (default: a new one per gateway process; a run id an agent sends is never used)")
	c.Flags().DurationVar(&f.approvalWait, "approval-wait", 0, "how long one call blocks on a pending approval before it returns approval_pending (default: the approval timeout)")
	c.Flags().DurationVar(&f.leaseWait, "lease-wait", 2*time.Second, "how long a call waits for the leases on what its tool touches (touches:, else the workdir) while another holder has them, before it is refused with tool_restricted (reason lease_conflict); 0 refuses at once")
	c.Flags().BoolVar(&f.confidential, "confidential", false, "confidential mode for every tool (seed 004 §11): audit argument hashes only; arguments marked confidential reach the tool as handles; results redacted by audit_logging.redact")
	c.Flags().StringVar(&f.control, "control", "", "control socket for klock tools (default <state-dir>/gateway/<agent>/control.sock)")
	c.Flags().StringVar(&f.receipts, "receipts", "", "budget ledger and signed receipts for the manifest's grants (default <workdir>/.klock/receipts)")
	c.Flags().StringVar(&f.receiptKey, "receipt-key", "", "ed25519 private key for receipts (default receipts.key in the receipts directory, created if missing)")
	c.Flags().StringVar(&f.rates, "rates", "", "rates file for charges in another currency than their grant's: each rate with its source and time, recorded in receipts (default: the manifest's rates:)")
	c.Flags().StringVar(&f.session, "session", "", "capability/session id the grants' budgets are kept under (default: agent.id)")
	c.Flags().StringVar(&f.parentGateway, "parent-gateway", "", "control socket of the parent agent's gateway: charge this agent's delegated grants (--parent-grant) in its ledger while it runs, receipts in its chain, instead of opening a ledger (--receipts is then unused)")
	c.Flags().StringVar(&f.parentGrant, "parent-grant", "", "delegate this agent's grants from the grant capability#index of the same ledger (--receipts): they may only tighten it, and their spend is charged to it too (default: the manifest's cost_envelope.parent_grant)")
	f.trust.register(c)
	f.events.register(c, "the gateway's (approvals asked and given, budget refusals, denied calls; also sent to klockd when it runs)")
	_ = c.MarkFlagRequired("manifest")
}

// start is open for a command that serves until Ctrl-C or SIGTERM: ctx
// ends then; an error is an exitError (exitInvalid for a refused
// manifest, else exitNoStart); closeAll closes the gateway, then stops
// listening for the signals.
func (f *gatewayFlags) start(parent context.Context) (ctx context.Context, m *policy.Manifest, gw *gateway.Gateway, closeAll func(), err error) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	m, gw, closeGW, err := f.open(ctx)
	if err != nil {
		stop()
		code := exitNoStart
		if manifestRefused(err) {
			code = exitInvalid
		}
		return nil, nil, nil, nil, &exitError{code: code, err: err}
	}
	return ctx, m, gw, func() { closeGW(); stop() }, nil
}

// open loads the manifest and opens the gateway and its control socket.
func (f *gatewayFlags) open(ctx context.Context) (*policy.Manifest, *gateway.Gateway, func(), error) {
	m, data, err := f.trust.load(f.manifest)
	if err != nil {
		return nil, nil, nil, err
	}
	f.data = data
	if f.stateDir == "" {
		f.stateDir = gateway.StateDir()
	}
	// Relative paths are resolved once, here: the plugin sessions and
	// the stores run with other working directories.
	if err := absPaths(&f.stateDir, &f.auditPath, &f.receipts, &f.receiptKey, &f.rates); err != nil {
		return nil, nil, nil, err
	}
	if f.runID == "" {
		f.runID = fmt.Sprintf("run_%d", time.Now().UnixNano())
	}
	var copts []check.Option
	if f.confidential {
		copts = append(copts, check.WithConfidential())
	}
	var gopts []gateway.Option
	if f.approvalWait > 0 {
		gopts = append(gopts, gateway.WithApprovalWait(f.approvalWait))
	}
	bopts, ledger, closeBudget, err := f.budgetOptions(ctx, m)
	if err != nil {
		return nil, nil, nil, err
	}
	gopts = append(gopts, bopts...)
	// Each call holds leases on what its tool touches while it runs
	// (KLIS-6 §5): a tool cannot change what an agent session holds.
	leases, closeLeases, err := toolLeases()
	if err != nil {
		closeBudget()
		return nil, nil, nil, fmt.Errorf("refusing to start without the lease store: %w", err)
	}
	gopts = append(gopts, gateway.WithLeases(leases, gateway.LeaseWait(f.leaseWait)))
	f.leases = leases
	events, closeEvents, err := f.events.gatewayEvents()
	if err != nil {
		closeBudget()
		closeLeases()
		return nil, nil, nil, err
	}
	gopts = append(gopts, gateway.WithEvents(events))
	// In a fleet the approval queue is the fleet's (etcd), so an operator
	// on any host decides the calls waiting here.
	queue, closeQueue, err := approvalQueue(f.stateDir)
	if err != nil {
		closeBudget()
		closeLeases()
		closeEvents()
		return nil, nil, nil, fmt.Errorf("refusing to start without an approval queue (--state-dir): %w", err)
	}
	closeStores := func() { closeBudget(); closeLeases(); closeEvents(); closeQueue() }
	l := gateway.Layout{Dir: f.stateDir, Agent: m.Agent.ID, Queue: queue}
	gw, st, err := gateway.Open(m, l, f.auditPath, copts, gopts...)
	if err != nil {
		closeStores()
		return nil, nil, nil, err
	}
	sock := f.control
	if sock == "" {
		sock = l.Control()
	}
	sopts := []control.ServeOption{control.WithRollback(gw.Rollback)}
	if ledger != nil {
		// Sub-agents' gateways (--parent-gateway) charge their delegated
		// grants in this ledger.
		sopts = append(sopts, control.WithLedger(ledger))
	}
	stop, err := control.Serve(ctx, sock, gw.Pipeline(), sopts...)
	if err != nil {
		st.Close()
		closeStores()
		return nil, nil, nil, err
	}
	return m, gw, func() { stop(); st.Close(); closeStores() }, nil
}

// budgetOptions charges the manifest's grants and receipts its rollbacks:
// in the ledger the gateway opens, when there is either to record (which it
// returns, to serve to sub-agents), or, with --parent-gateway, in the
// ledger of the parent's gateway on that socket.
func (f *gatewayFlags) budgetOptions(ctx context.Context, m *policy.Manifest) ([]gateway.Option, charge.Ledger, func(), error) {
	if f.parentGateway != "" {
		return f.parentLedger(ctx, m)
	}
	_, noReceipts := receiptsDir(m, f.manifest, f.receipts)
	if len(m.Grants) == 0 && reversible(m) && noReceipts != nil {
		slog.Warn("klock: rollbacks of REVERSIBLE-WRITE calls will be audited but not receipted: pass --receipts DIR (or set workdir)", "manifest", f.manifest)
	}
	if len(m.Grants) == 0 && (!reversible(m) || noReceipts != nil) {
		return nil, nil, func() {}, nil
	}
	ch, store, ph, closeB, err := f.openBudget(ctx, m)
	if err != nil {
		return nil, nil, nil, err
	}
	var opts []gateway.Option
	if len(m.Grants) > 0 {
		opts = append(opts, gateway.WithCharger(ch))
	}
	return append(opts, gateway.WithReceipts(store.Record), gateway.WithPolicyHash(ph)), store, closeB, nil
}

// parentLedger charges a sub-agent's delegated grants (cost_envelope.
// parent_grant or --parent-grant) in its parent's ledger, through the
// parent's gateway's control socket: both run at once, one process owning
// the ledger; the receipts go to the parent's chain.
func (f *gatewayFlags) parentLedger(ctx context.Context, m *policy.Manifest) ([]gateway.Option, charge.Ledger, func(), error) {
	if f.parentGrant != "" && m.CostEnvelope != nil {
		m.CostEnvelope.ParentGrant = f.parentGrant
	}
	if m.CostEnvelope == nil || m.CostEnvelope.ParentGrant == "" {
		return nil, nil, nil, &exitError{code: exitUsage, err: errors.New("--parent-gateway charges delegated grants: name the parent's grant (--parent-grant or cost_envelope.parent_grant)")}
	}
	ph, err := charge.PolicyHash(f.data)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("policy_hash of %s: %w", f.manifest, err)
	}
	led := control.Dial(f.parentGateway).Ledger()
	session := f.session
	if session == "" {
		session = m.Agent.ID
	}
	ch, err := charge.New(ctx, m, led, session, charge.WithPolicyHash(ph))
	if err != nil {
		return nil, nil, nil, err
	}
	return []gateway.Option{gateway.WithCharger(ch), gateway.WithReceipts(led.Record), gateway.WithPolicyHash(ph)}, nil, func() {}, nil
}

// openBudget opens the ledger and the charger for the manifest's grants
// (shared with the fleet when the host is in one): a gateway whose grants
// cannot be charged does not start. closeB closes what it opened.
func (f *gatewayFlags) openBudget(ctx context.Context, m *policy.Manifest) (ch *charge.Charger, store *budget.Store, ph string, closeB func(), err error) {
	dir, err := receiptsDir(m, f.manifest, f.receipts)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("refusing to start: the manifest has grants to charge or rollbacks to receipt, and %w", err)
	}
	// Every receipt names the policy it was decided under: the hash of
	// the manifest's canonical (signed) form.
	if ph, err = charge.PolicyHash(f.data); err != nil {
		return nil, nil, "", nil, fmt.Errorf("policy_hash of %s: %w", f.manifest, err)
	}
	store, err = openLedger(m, dir, f.receiptKey, f.rates, ph)
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("refusing to start without the budget ledger and receipts: %w", err)
	}
	led, closeB, err := fleetLedger(store, dir)
	if err != nil {
		closeLedger(store)
		return nil, nil, "", nil, fmt.Errorf("refusing to start: this host is in a fleet whose budgets cannot be shared: %w", err)
	}
	session := f.session
	if session == "" {
		session = m.Agent.ID
	}
	if f.parentGrant != "" && m.CostEnvelope != nil {
		m.CostEnvelope.ParentGrant = f.parentGrant
	}
	if ch, err = charge.New(ctx, m, led, session, charge.WithPolicyHash(ph)); err != nil {
		closeB()
		return nil, nil, "", nil, err
	}
	return ch, store, ph, closeB, nil
}

// reversible: the manifest declares a REVERSIBLE-WRITE tool, whose
// rollbacks are receipted.
func reversible(m *policy.Manifest) bool {
	for _, t := range m.DeclaredTools {
		if t.SideEffects == policy.SideEffectReversibleWrite {
			return true
		}
	}
	return false
}

// mcpOptions are klock mcp's flags; run is the command.
type mcpOptions struct {
	f                      gatewayFlags
	listen, upstream, user string
	enforce                bool
}

func newMCP() *cobra.Command {
	o := &mcpOptions{}
	c := &cobra.Command{
		Use:   "mcp -m MANIFEST [flags] -- SERVER [ARGS...]",
		Short: "Proxy an MCP server: only declared tools, every call checked against its contract and audited",
		Long: `mcp runs between an MCP client (the agent) and a real MCP server.

tools/list shows only the tools the manifest declares. Every tools/call
passes, cheapest first: declared tool and capability tool.<name>.invoke;
category A-D defaults (timeout, rate); input_schema constraints and
must_match context bindings; rate limits per run and per minute/hour/day;
idempotency (a repeated key returns the stored result, never a second
effect); side-effect class and autonomy (unsupervised_if, CEL); HITL and the
lethal trifecta (the call waits for klock approve); then, for the call's
duration, KLIS leases on what the tool's contract touches (touches:, else
MUTATES of the workdir; CONSUMES for a READ tool), refused while another
holder has them (tool_restricted, reason lease_conflict, retryable; it
waits up to --lease-wait first). A refused call comes
back as a tool result with isError and a typed error:
  {"ok":false,"error_class":"tool_invalid_args","retryable":false,"message":...}
Everything else in the protocol passes through untouched.

The contract holds the answers too: a result that breaks output_schema (a
declared number that comes back null or as a string) is withheld as
tool_internal_error; a must_belong_to argument is checked by calling its
lookup tool first; max_consecutive_errors (default 3) failures in a row
stop a tool for the run; a category C tool needs tool.<name>.sensitive and
a category D tool's first call in a run waits for approval; a cost the
server reports in the result's _meta ({"cost":"0.12 USD"}, or {"cost":
{"units":15,"currency":"USD","breakdown":{"compute":12,"io":3}}}, charged
as the breakdown's sum) is charged, with the tool's cost_per_invocation on
top. The contract's permission holds too: acts_as reaches the server in the
call's _meta ("klock/acts_as"; over HTTP also the Klock-Acts-As header), and
a call whose arguments, or where its paths lead, fall outside scope or match
forbidden is refused (tool_restricted, reason permission_scope or
permission_forbidden). A tool that is not idempotent is never retried
blindly: the same call again in the run waits for approval.

stdio (default): klock mcp starts SERVER and speaks MCP on its own stdin/
stdout; put it where the client expects the server's command.
HTTP: --listen ADDR --upstream URL proxies a streamable HTTP server.

When the manifest has grants, a granted tool's calls are charged to its
budget (max_cost_per_invocation, max_total_cost, max_invocations): the worst
case is pre-charged before dispatch and reconciled with the cost the tool
reports (unavailable, the reservation standing, when it reports none); a
call over a limit is refused with tool_restricted (reason budget). Each
decision is a signed receipt in --receipts (default <workdir>/.klock/receipts;
klock receipts verify DIR) carrying policy_hash (the manifest's), content_hash
(arguments and result; keyed under --confidential) and evidence (the cost's
source, the exchange rate). A cost in another currency converts with --rates
FILE (else the manifest's rates:), each rate with its source and time; a
reconcile without a usable rate settles at the reserved worst case, marked.

Every call is appended to a hash-chained audit log (klock audit verify PATH),
with the values audit_logging.records names; --confidential keeps only
HMAC-SHA256 digests under <state-dir>/audit.key. A gateway that cannot
write it (or its budget ledger) refuses to start or to dispatch. klock tools changes a running
gateway (disable a tool, lower a limit) through its control socket.

A REVERSIBLE-WRITE call's declared rollback (rollback.mechanism written as a
call, e.g. void_refund(refund_id)) is journaled beside the audit log; when
the run's session is killed (klock run --gateway SOCKET --gateway-run RUN,
or klock tools rollback --run RUN) the gateway runs it, audits it and
records it in a signed receipt.

--enforce runs SERVER as a strict klock session under the manifest, as the
owner of workdir, else the user who ran sudo (--user UID picks another;
--user 0 is needed to run it as root). An operation the kernel wall refuses
the server reaches the agent as tool_sandbox_violation, naming the session
whose log (klock log ID) lists what was blocked.

Exit status: 0 when the client or server closed the session, 1 the manifest
is invalid, 125 the gateway could not start (the message says why).`,
		Example: `  # stdio: a filesystem server behind the gateway (client config: command = klock)
  klock mcp -m agent.yaml -- npx @modelcontextprotocol/server-filesystem /srv/data

  # bind the refund tool to the task's customer (must_match: task.customer_id)
  klock mcp -m refund-agent.yaml --context task.customer_id=c_42 -- ./payments-mcp

  # streamable HTTP
  klock mcp -m agent.yaml --listen 127.0.0.1:8808 --upstream http://127.0.0.1:3001/mcp

  # the server itself runs under kernel enforcement with the manifest's scope
  sudo klock mcp -m agent.yaml --enforce -- npx @modelcontextprotocol/server-filesystem /srv/data

  # grants charged, receipts in /tmp/r; then verify them offline
  klock mcp -m agent.yaml --receipts /tmp/r -- ./payments-mcp
  klock receipts verify /tmp/r

  # a second terminal: pending approvals, and the decision
  klock approvals
  klock approve ap_0123456789ab`,
		RunE: o.run,
	}
	o.f.register(c)
	c.Flags().StringVar(&o.listen, "listen", "", "HTTP mode: address to serve streamable HTTP on, e.g. 127.0.0.1:8808")
	c.Flags().StringVar(&o.upstream, "upstream", "", "HTTP mode: the MCP server's endpoint URL")
	c.Flags().BoolVar(&o.enforce, "enforce", false, "run SERVER under kernel enforcement with the manifest's scope (root)")
	c.Flags().StringVar(&o.user, "user", "", "--enforce: uid to run SERVER as (default: owner of workdir, else SUDO_UID; 0 only when explicit)")
	return c
}

// run checks the transport's flags (a stdio SERVER or --listen/--upstream,
// --enforce, --user), opens the gateway and proxies the MCP server through
// it until a signal or the end of the session.
func (o *mcpOptions) run(cmd *cobra.Command, args []string) error {
	httpMode := o.listen != "" || o.upstream != ""
	switch {
	case httpMode && (o.listen == "" || o.upstream == ""):
		return &exitError{code: exitUsage, err: errors.New("HTTP mode needs both --listen ADDR and --upstream URL")}
	case httpMode && len(args) > 0:
		return &exitError{code: exitUsage, err: errors.New("give either a SERVER command (stdio) or --listen/--upstream (HTTP), not both")}
	case !httpMode && len(args) == 0:
		return &exitError{code: exitUsage, err: errors.New("name the MCP server to run after --, e.g. klock mcp -m agent.yaml -- npx @modelcontextprotocol/server-filesystem /srv/data")}
	case httpMode && o.enforce:
		return &exitError{code: exitUsage, err: errors.New("--enforce runs a stdio server under klock; for HTTP, start the server with klock run")}
	case o.user != "" && !o.enforce:
		return &exitError{code: exitUsage, err: errors.New("--user names who the server runs as under --enforce; without --enforce it runs as you")}
	}
	if o.user != "" {
		if _, err := credential(o.user, ""); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
	}
	callCtx, err := parseContext(o.f.context)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ctx, m, gw, closeGW, err := o.f.start(cmd.Context())
	if err != nil {
		return err
	}
	defer closeGW()
	popts := []mcpproxy.Option{mcpproxy.WithContext(callCtx), mcpproxy.WithRunID(o.f.runID)}
	sessionID := ""
	if o.enforce {
		// Known before the server starts, so a refusal can name it.
		sessionID = session.NewID(time.Now())
		popts = append(popts, mcpproxy.WithEnforcedSession(sessionID))
	}
	p := mcpproxy.New(gw, popts...)
	if httpMode {
		return serveHTTP(ctx, p, o.listen, o.upstream)
	}
	if o.enforce {
		return serveEnforced(ctx, p, m, o.f.manifest, o.f.data, enforcedServer{id: sessionID, user: o.user, args: args})
	}
	return serveStdio(ctx, p, args)
}

func serveStdio(ctx context.Context, p *mcpproxy.Proxy, args []string) error {
	srv := exec.Command(args[0], args[1:]...)
	srv.Stderr = os.Stderr
	in, err := srv.StdinPipe()
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	out, err := srv.StdoutPipe()
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	if err := srv.Start(); err != nil {
		return &exitError{code: exitNoStart, err: fmt.Errorf("start MCP server: %w", err)}
	}
	perr := p.ServeStdio(ctx, os.Stdin, os.Stdout, in, out)
	in.Close() // EOF tells a stdio server to exit
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		srv.Process.Kill()
		<-done
	}
	if perr != nil {
		return &exitError{code: exitNoStart, err: perr}
	}
	return nil
}

// absPaths makes each non-empty path absolute against the working
// directory.
func absPaths(paths ...*string) error {
	for _, p := range paths {
		if *p == "" || filepath.IsAbs(*p) {
			continue
		}
		a, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", *p, err)
		}
		*p = a
	}
	return nil
}
