package meter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// Budget is what the proxy needs from the ledger.
type Budget interface {
	budget.Authorizer
	Usage(ctx context.Context, k budget.Key) (budget.Usage, error)
}

// Config is the proxy's wiring.
type Config struct {
	Upstream *url.URL
	Budget   Budget
	Key      budget.Key // the grant model calls are charged to
	Guard    *tokenguard.Guard
	Prices   *Prices
	AgentID  string
	// PolicyHash is the manifest's hash, every receipt's policy_hash.
	PolicyHash string
	// Approver answers Token Guard escalations; nil refuses them.
	Approver tokenguard.Approver
	Client   *http.Client
	Log      *slog.Logger
	// RunID is the agent invocation every call belongs to when the request
	// names none (RunHeader); empty: each call is its own invocation.
	RunID string
	// Runs tracks what each invocation used (default: a fresh tracker).
	Runs *tokenguard.Runs
}

// RunHeader names the agent invocation a model call belongs to: the cost
// envelope holds the whole invocation, across its calls.
const RunHeader = "X-Klock-Run-Id"

// WithRunID fixes the invocation of calls that do not name one.
func WithRunID(id string) Option { return func(c *Config) { c.RunID = id } }

// Proxy is the metering reverse proxy (an http.Handler).
type Proxy struct{ c Config }

// Option configures New.
type Option func(*Config)

// WithApprover sets the escalation approver.
func WithApprover(a tokenguard.Approver) Option { return func(c *Config) { c.Approver = a } }

// WithClient sets the upstream HTTP client.
func WithClient(cl *http.Client) Option { return func(c *Config) { c.Client = cl } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *Config) { c.Log = l } }

const (
	maxBody  = 8 << 20
	maxEvent = 1 << 20
	// bytesPerToken estimates input tokens from the request size. It over-
	// counts for English text (about 4 bytes a token) because the JSON
	// around the messages is counted too: an estimate errs on the side of
	// the budget, and the reconcile corrects it with the API's usage.
	bytesPerToken = 4
)

// New returns a proxy.
func New(c Config, opts ...Option) (*Proxy, error) {
	for _, o := range opts {
		o(&c)
	}
	if c.Upstream == nil || c.Budget == nil || c.Guard == nil || c.Prices == nil {
		return nil, errors.New("meter: upstream, budget, guard and prices are required")
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Runs == nil {
		c.Runs = tokenguard.NewRuns()
	}
	return &Proxy{c: c}, nil
}

// apiError is the typed error body clients get.
type apiError struct {
	OK         bool   `json:"ok"`
	ErrorClass string `json:"error_class"`
	Retryable  bool   `json:"retryable"`
	Message    string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, class string, retryable bool, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(apiError{ErrorClass: class, Retryable: retryable, Message: "klock meter: " + err.Error()})
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	api, ok := APIFor(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		writeError(w, http.StatusNotFound, "not_metered", false,
			fmt.Errorf("%s %s is not a metered model call (POST /v1/chat/completions, /v1/responses or /v1/messages)", r.Method, r.URL.Path))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "bad_request", false, fmt.Errorf("%w: body unreadable or over %d bytes", ErrRequest, maxBody))
		return
	}
	req, err := ParseRequest(api, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", false, err)
		return
	}
	p.serve(w, r, req, body)
}

// call is one metered invocation in progress.
type call struct {
	req      *Request
	price    Price
	estIn    int64
	capOut   int64
	hold     budget.Hold
	envelope *receipt.Envelope
	estimate *receipt.Tokens
	started  time.Time
	// run is the agent invocation ("" for none), used what it had used
	// before this call, deadline its max_latency_ms (zero: none).
	run      string
	used     tokenguard.Usage
	deadline time.Time
	// evidence is each guard's verdict so far, carried by the call's
	// receipts (pre-charge, refusal, reconcile).
	evidence []receipt.Evidence
}

// serve meters one model call: estimate it, admit it through the Token
// Guard, cap its output, reserve its worst case, then forward it. Each
// phase that refuses has answered the client already.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, req *Request, body []byte) {
	c := &call{req: req, estIn: (int64(len(body)) + bytesPerToken - 1) / bytesPerToken, started: time.Now()}
	env := p.c.Guard.Envelope()
	c.envelope = &receipt.Envelope{MaxTokensIn: units(env.MaxTokensIn), MaxTokensOut: units(env.MaxTokensOut), MaxLatencyMS: units(env.MaxLatencyMS)}
	if env.MaxCost != nil {
		c.envelope.MaxCost, c.envelope.Currency = receipt.U(env.MaxCost.Units), env.MaxCost.Currency
	}
	est, ok := p.estimate(w, r, c, env)
	if !ok || !p.admit(w, r, c, env, est, body) || !p.capOutput(w, r, c, env) || !p.reserve(w, r, c) {
		return
	}
	out, err := req.Rewrite(c.capOut)
	if err != nil {
		p.release(c, "request rewrite failed: "+err.Error())
		writeError(w, http.StatusBadRequest, "bad_request", false, err)
		return
	}
	p.forward(w, r, c, out)
}

// estimate prices the call and estimates it for the Token Guard: the
// output the client asked for, or the envelope's expected output when it
// did not say.
func (p *Proxy) estimate(w http.ResponseWriter, r *http.Request, c *call, env policy.CostEnvelope) (tokenguard.Estimate, bool) {
	var err error
	if c.price, err = p.c.Prices.lookup(c.req.Model); err != nil {
		p.refuse(w, r, c, http.StatusBadRequest, "unpriced_model", err)
		return tokenguard.Estimate{}, false
	}
	estOut := c.req.MaxOut
	if estOut == 0 {
		estOut = env.ExpectedTokensOut
	}
	estCost, err := p.c.Prices.Cost(c.price, c.estIn, estOut)
	if err != nil {
		p.refuse(w, r, c, http.StatusBadRequest, "bad_request", err)
		return tokenguard.Estimate{}, false
	}
	c.estimate = &receipt.Tokens{TokensIn: units(c.estIn), TokensOut: units(estOut), Cost: receipt.U(estCost.Units)}
	return tokenguard.Estimate{TokensIn: c.estIn, TokensOut: estOut, Cost: &estCost}, true
}

// admit asks the Token Guard to admit the call. The envelope holds the
// invocation: this call is judged with what the invocation's earlier calls
// used, and its latency since it began.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, c *call, env policy.CostEnvelope, est tokenguard.Estimate, body []byte) bool {
	estCost := *est.Cost
	started := c.started
	if c.run = r.Header.Get(RunHeader); c.run == "" {
		c.run = p.c.RunID
	}
	if c.run != "" {
		c.used, started = p.c.Runs.Begin(c.run)
		est.TokensIn += c.used.TokensIn
		est.TokensOut += c.used.TokensOut
		est.LatencyMS = time.Since(started).Milliseconds()
		if u := c.used.Cost; u != nil && u.Currency == estCost.Currency {
			sum := money.Amount{Units: u.Units + estCost.Units, Currency: u.Currency}
			est.Cost = &sum
		}
	}
	if env.MaxLatencyMS > 0 {
		c.deadline = started.Add(time.Duration(env.MaxLatencyMS) * time.Millisecond)
	}
	fp := sha256.Sum256(append([]byte(p.c.AgentID+"\x00"+c.run+"\x00"+r.URL.Path+"\x00"), body...))
	d, err := p.c.Guard.AdmitRequest(r.Context(), tokenguard.ApprovalRequest{Subject: p.c.AgentID, Tool: "model:" + c.req.Model,
		Fingerprint: hex.EncodeToString(fp[:]), Estimate: est}, p.c.Approver)
	if err != nil {
		p.refuseAdmission(w, r, c, err)
		return false
	}
	how := "within the envelope"
	if d.Verdict == tokenguard.Escalate {
		how = "near the envelope, approved by a human (" + strings.Join(d.Near, "; ") + ")"
	}
	c.evidence = append(c.evidence, receipt.Evidence{GuardName: "token-guard", Verdict: true, Details: fmt.Sprintf(
		"invocation estimate %d tokens in, %d out: %s (max_tokens_in %d, max_tokens_out %d)", est.TokensIn, est.TokensOut, how, env.MaxTokensIn, env.MaxTokensOut)})
	return true
}

// capOutput caps the output to what the invocation's envelope has left and
// to what the money allows, refusing a call with nothing left for it.
func (p *Proxy) capOutput(w http.ResponseWriter, r *http.Request, c *call, env policy.CostEnvelope) bool {
	c.capOut = env.MaxTokensOut
	if c.capOut > 0 {
		c.capOut -= c.used.TokensOut
		if c.capOut <= 0 {
			p.refuse(w, r, c, http.StatusForbidden, "token_guard",
				fmt.Errorf("%w: invocation %s has used its max_tokens_out (%d)", tokenguard.ErrRefused, c.run, env.MaxTokensOut))
			return false
		}
	}
	if c.req.MaxOut > 0 && (c.capOut == 0 || c.req.MaxOut < c.capOut) {
		c.capOut = c.req.MaxOut
	}
	limit, err := p.moneyLimit(r.Context(), c)
	if err != nil {
		p.refuse(w, r, c, http.StatusServiceUnavailable, "ledger", err)
		return false
	}
	if limit != nil {
		if a := p.c.Prices.affordable(c.price, c.estIn, *limit); c.capOut == 0 || a < c.capOut {
			c.capOut = a
		}
	}
	if c.capOut <= 0 {
		p.refuse(w, r, c, http.StatusPaymentRequired, "budget_exhausted",
			fmt.Errorf("%w: the remaining budget does not cover the input of this call", budget.ErrDenied))
		return false
	}
	c.evidence = append(c.evidence, receipt.Evidence{GuardName: "output-cap", Verdict: true,
		Details: fmt.Sprintf("output capped at %d tokens (what the envelope, the request and the money left allow)", c.capOut)})
	return true
}

// reserve holds the call's worst case (its input and capped output) in the
// budget; a denial's receipt is the budget's to write.
func (p *Proxy) reserve(w http.ResponseWriter, r *http.Request, c *call) bool {
	req := c.req
	worst, err := p.c.Prices.Cost(c.price, c.estIn, c.capOut)
	if err != nil {
		p.refuse(w, r, c, http.StatusBadRequest, "bad_request", err)
		return false
	}
	params, _ := json.Marshal(map[string]any{"api": req.API, "model": req.Model, "stream": req.Stream, "max_output_tokens": c.capOut})
	c.hold, err = p.c.Budget.Reserve(r.Context(), budget.Request{Key: p.c.Key, Cost: worst, Tool: req.Model, Server: p.c.Upstream.Host,
		Parameters: params, PolicyHash: p.c.PolicyHash, Evidence: c.evidence, CostMeta: &receipt.Cost{Envelope: c.envelope, Estimate: c.estimate, Kind: receipt.KindModel, RunID: c.run}})
	if err != nil {
		status, class, retry := http.StatusPaymentRequired, "budget_denied", false
		if errors.Is(err, budget.ErrLedger) {
			status, class, retry = http.StatusServiceUnavailable, "ledger", true
		}
		writeError(w, status, class, retry, err) // the budget wrote the deny receipt
		return false
	}
	return true
}

// moneyLimit is the most one call may cost: the smallest of the envelope's
// max_cost, the grant's per-invocation limit and what its total has left.
func (p *Proxy) moneyLimit(ctx context.Context, c *call) (*uint64, error) {
	var lim *uint64
	tighten := func(v uint64) {
		if lim == nil || v < *lim {
			lim = &v
		}
	}
	if m := p.c.Guard.Envelope().MaxCost; m != nil && m.Currency == p.c.Prices.Currency {
		left := m.Units
		if u := c.used.Cost; u != nil && u.Currency == m.Currency {
			left -= min(u.Units, left) // what the invocation has not spent yet
		}
		tighten(left)
	}
	u, err := p.c.Budget.Usage(ctx, p.c.Key)
	if err != nil {
		return nil, err
	}
	if u.Limits.Currency == p.c.Prices.Currency {
		if pi := u.Limits.PerInvocation; pi != nil {
			tighten(*pi)
		}
		if t := u.Limits.Total; t != nil {
			rem := uint64(0)
			if *t > u.Charged.Units {
				rem = *t - u.Charged.Units
			}
			tighten(rem)
		}
	}
	return lim, nil
}

func units(v int64) receipt.Units {
	if v < 0 {
		return 0
	}
	return receipt.Units(v)
}

// refuse answers a call refused before any money moved, with a receipt.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, c *call, status int, class string, cause error) {
	p.refuseRetry(w, r, c, status, class, false, cause)
}

func (p *Proxy) refuseRetry(w http.ResponseWriter, r *http.Request, c *call, status int, class string, retry bool, cause error) {
	rc := &receipt.Receipt{CapabilityID: p.c.Key.Capability, AgentID: p.c.AgentID, ToolName: c.req.Model, ToolServer: p.c.Upstream.Host,
		Phase: receipt.PhaseGuard, Decision: receipt.Decision{Verdict: receipt.Deny, Reason: cause.Error(), Guard: class},
		Metadata: receipt.Metadata{Cost: &receipt.Cost{Envelope: c.envelope, Estimate: c.estimate, Kind: receipt.KindModel, RunID: c.run}},
		Evidence: append(c.evidence[:len(c.evidence):len(c.evidence)], receipt.Evidence{GuardName: class, Verdict: false, Details: cause.Error()})}
	if err := p.c.Budget.Record(r.Context(), rc); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ledger", true, fmt.Errorf("%v (and the refusal could not be recorded: %w)", cause, err))
		return
	}
	writeError(w, status, class, retry, cause)
}

// refuseAdmission answers a Token Guard refusal with its typed class:
// token_guard (over a max, or no approver), approval_denied,
// approval_timeout, or approval_pending (retryable: the same request
// retried waits on the same approval).
func (p *Proxy) refuseAdmission(w http.ResponseWriter, r *http.Request, c *call, err error) {
	class := "token_guard"
	switch {
	case errors.Is(err, tokenguard.ErrApprovalPending):
		class = "approval_pending"
	case errors.Is(err, tokenguard.ErrApprovalTimeout):
		class = "approval_timeout"
	case errors.Is(err, tokenguard.ErrNotApproved):
		class = "approval_denied"
	}
	p.refuseRetry(w, r, c, http.StatusForbidden, class, class == "approval_pending", err)
}

func (p *Proxy) release(c *call, reason string) {
	if _, err := p.c.Budget.Release(context.WithoutCancel(context.Background()), c.hold.ID, reason, "meter"); err != nil {
		p.c.Log.Error("meter: release failed; the hold stays charged", "hold", c.hold.ID, "err", err)
	}
}

func (p *Proxy) settle(c *call, t *Tally, cutReason string) {
	act := &receipt.Actual{LatencyMS: units(time.Since(c.started).Milliseconds())}
	actual := c.hold.Reserved
	var tgActual tokenguard.Actual
	switch {
	case cutReason == "" && t.HaveIn && t.HaveOut:
		cost, err := p.c.Prices.Cost(c.price, t.In, t.Out)
		if err == nil {
			actual = cost
			act.TokensIn, act.TokensOut, act.Cost, act.Source = units(t.In), units(t.Out), receipt.U(cost.Units), string(tokenguard.APIUsage)
			tgActual = tokenguard.Actual{TokensIn: t.In, TokensOut: t.Out, LatencyMS: int64(act.LatencyMS), Cost: &cost, Source: tokenguard.APIUsage}
			break
		}
		cutReason = "usage could not be priced: " + err.Error()
		fallthrough
	default:
		reason := cutReason
		if reason == "" {
			reason = "the API reported no usage"
		}
		act = &receipt.Actual{Source: string(tokenguard.Unavailable), UnavailableReason: reason + "; the full reservation stays charged"}
		tgActual = tokenguard.Actual{Source: tokenguard.Unavailable, UnavailableReason: act.UnavailableReason}
	}
	meta := &receipt.Cost{Envelope: c.envelope, Estimate: c.estimate, Actual: act, Exceeded: p.c.Guard.Exceeded(tgActual), Kind: receipt.KindModel, RunID: c.run}
	if c.run != "" {
		// The invocation is charged what the call used, or, unknown, its
		// whole reservation: never less than it may have cost.
		u := tokenguard.Usage{TokensIn: c.estIn, TokensOut: c.capOut, Cost: &actual}
		if tgActual.Source != tokenguard.Unavailable {
			u.TokensIn, u.TokensOut = tgActual.TokensIn, tgActual.TokensOut
		}
		p.c.Runs.Add(c.run, u)
	}
	ev := receipt.Evidence{GuardName: "cost-source", Verdict: act.Source == string(tokenguard.APIUsage), Details: act.Source}
	if act.UnavailableReason != "" {
		ev.Details += ": " + act.UnavailableReason
	}
	settle := budget.Settle{Actual: actual, CostMeta: meta, PolicyHash: p.c.PolicyHash, Evidence: append(c.evidence[:len(c.evidence):len(c.evidence)], ev)}
	if _, err := p.c.Budget.Reconcile(context.Background(), c.hold.ID, settle); err != nil {
		p.c.Log.Error("meter: reconcile failed; the reservation stays charged", "hold", c.hold.ID, "err", err)
	}
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, c *call, body []byte) {
	base := r.Context()
	if !c.deadline.IsZero() {
		// KCC's max_latency_ms: the call is cancelled when the invocation
		// reaches it, wherever it is (connecting, waiting, streaming).
		var cancel context.CancelFunc
		base, cancel = context.WithDeadlineCause(base, c.deadline, tokenguard.ErrLatency)
		defer cancel()
	}
	flight, ctx := p.c.Guard.Start(base)
	defer flight.End()
	u := *p.c.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		p.release(c, err.Error())
		writeError(w, http.StatusBadGateway, "upstream", true, err)
		return
	}
	for k, vs := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Connection", "Accept-Encoding", "Transfer-Encoding":
			continue
		}
		up.Header[k] = vs
	}
	resp, err := p.c.Client.Do(up)
	if err != nil && p.latencyCut(ctx) {
		// The request may have reached the API: its reservation stands.
		p.settle(c, &Tally{}, p.latencyReason(c))
		p.timeout(w, c)
		return
	}
	if err != nil {
		p.release(c, "upstream unreachable: "+err.Error())
		writeError(w, http.StatusBadGateway, "upstream", true, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// An API error is not billed; pass it through and reverse.
		p.release(c, fmt.Sprintf("upstream answered %s", resp.Status))
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, io.LimitReader(resp.Body, maxBody))
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		p.stream(ctx, w, c, resp, flight)
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	var t Tally
	cut := ""
	if err != nil && p.latencyCut(ctx) {
		p.settle(c, &t, p.latencyReason(c))
		p.timeout(w, c)
		return
	}
	if err != nil {
		cut = "response read failed: " + err.Error()
	} else if err := t.Body(data); err != nil {
		cut = err.Error()
	}
	p.settle(c, &t, cut)
	copyHeader(w, resp)
	w.WriteHeader(resp.StatusCode)
	w.Write(data)
}

func copyHeader(w http.ResponseWriter, resp *http.Response) {
	for k, vs := range resp.Header {
		if http.CanonicalHeaderKey(k) == "Content-Length" {
			continue
		}
		w.Header()[k] = vs
	}
}

// stream relays SSE events one by one, holding the running output to the
// Token Guard and the reservation; crossing either cuts the stream.
func (p *Proxy) stream(ctx context.Context, w http.ResponseWriter, c *call, resp *http.Response, flight *tokenguard.Flight) {
	copyHeader(w, resp)
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	er := NewEventReader(resp.Body, maxEvent)
	var t Tally
	cut, class, kind := "", "budget_cut", "klock_budget_exceeded"
	for {
		ev, err := er.Next()
		if err == io.EOF {
			break
		}
		if err != nil && p.latencyCut(ctx) {
			cut, class, kind = p.latencyReason(c), "timeout", "klock_timeout"
			break
		}
		if err != nil {
			cut = "stream broke: " + err.Error()
			break
		}
		if err := t.Event(ev); err != nil {
			cut = err.Error()
			break
		}
		if reason := p.overBudget(c, &t, flight); reason != "" {
			cut = reason
			break
		}
		if _, err := w.Write(ev.Raw); err != nil {
			cut = "client went away"
			break
		}
		if fl != nil {
			fl.Flush()
		}
	}
	if cut != "" {
		resp.Body.Close() // cancels the upstream call
		msg, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{
			"type": kind, "error_class": class, "retryable": false, "message": "klock meter: stream cut: " + cut}})
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", msg)
		if fl != nil {
			fl.Flush()
		}
	}
	if cut != "" {
		cut = "stream cut by klock before the API reported usage: " + cut
	}
	p.settle(c, &t, cut)
}

// overBudget says why the stream must stop now ("" to go on): the Token
// Guard's hard limits, or output past what was reserved.
func (p *Proxy) overBudget(c *call, t *Tally, flight *tokenguard.Flight) string {
	in := c.estIn
	if t.HaveIn {
		in = t.In
	}
	out := t.OutSoFar()
	cost, err := p.c.Prices.Cost(c.price, in, out)
	if err != nil {
		return err.Error()
	}
	if err := flight.Observe(tokenguard.Usage{TokensIn: in, TokensOut: out, Cost: &cost}); err != nil {
		return err.Error()
	}
	if cost.Currency == c.hold.Reserved.Currency && cost.Units > c.hold.Reserved.Units {
		return fmt.Sprintf("%d output tokens so far would cost %s, over the %s reserved", out, cost, c.hold.Reserved)
	}
	if out > c.capOut {
		return fmt.Sprintf("%d output tokens, over the cap of %d", out, c.capOut)
	}
	return ""
}
