package toolproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sort"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/money"
)

// Provider reaches the tools.
type Provider interface {
	// Provides reports whether tool can be reached.
	Provides(tool string) bool
	// Invoke runs call; ctx carries the contract's deadline.
	Invoke(ctx context.Context, call *check.Call) (gateway.Outcome, error)
}

// Proxy is the HTTP tool proxy (an http.Handler).
type Proxy struct {
	gw    *gateway.Gateway
	tools Provider
	ctx   map[string]any // operator context, wins over the request's
	runID string         // the run every call belongs to (see toCall)
}

// Option configures New.
type Option func(*Proxy)

// WithContext fixes context keys (operator's --context). Dotted keys are
// nested (policy.NestContext) so they meet the request's context, nested
// the same way, key by key; a context that cannot be nested (a key both a
// value and a map) is kept as given: the CLI refuses it before this.
func WithContext(c map[string]any) Option {
	return func(p *Proxy) {
		p.ctx = c
		if n, err := policy.NestContext(c); err == nil {
			p.ctx = n
		}
	}
}

// WithRunID fixes the run id (operator's --run-id; default: one new run
// per proxy).
func WithRunID(id string) Option { return func(p *Proxy) { p.runID = id } }

// New returns the proxy.
func New(gw *gateway.Gateway, tools Provider, opts ...Option) *Proxy {
	p := &Proxy{gw: gw, tools: tools}
	for _, o := range opts {
		o(p)
	}
	if p.runID == "" {
		var b [8]byte
		rand.Read(b[:])
		p.runID = "run_" + hex.EncodeToString(b[:])
	}
	// Compensations journaled before a restart reach their plugins here.
	gw.SetInvoker(p.invoke)
	return p
}

// Response is seed 004 §5.2's response.
type Response struct {
	OK         bool            `json:"ok"`
	Output     json.RawMessage `json:"output"`
	TokensUsed int64           `json:"tokens_used"`
	// Cost is what the tool reported (null: it reported none).
	Cost *money.Amount `json:"cost"`
	// Charged is what the budget charged (absent: the tool has no grant).
	Charged  *check.Charged `json:"charged,omitempty"`
	Replayed bool           `json:"replayed,omitempty"`
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/tools/call" && r.Method == http.MethodPost:
		p.call(w, r)
	case r.URL.Path == "/v1/tools" && r.Method == http.MethodGet:
		p.list(w)
	default:
		writeErr(w, toolerr.New(toolerr.InvalidArgs, "route", "%s %s is not a tool proxy route (POST /v1/tools/call, GET /v1/tools)", r.Method, r.URL.Path))
	}
}

func (p *Proxy) call(w http.ResponseWriter, r *http.Request) {
	req, err := DecodeRequest(r.Body)
	if err != nil {
		writeErr(w, toolerr.New(toolerr.InvalidArgs, "request", "%v", err))
		return
	}
	c := p.toCall(req)
	dispatch := func(ctx context.Context) (gateway.Outcome, error) {
		if !p.tools.Provides(c.Tool) {
			return gateway.Outcome{}, errNoProvider(c.Tool)
		}
		return p.tools.Invoke(ctx, c)
	}
	out, te := p.gw.CallWith(r.Context(), c, dispatch, p.invoke)
	if te != nil {
		writeErr(w, te)
		return
	}
	if out.ToolError {
		// The tool ran and failed by itself: its result holds the typed error.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		w.Write(out.Result)
		return
	}
	resp := Response{OK: true, Output: out.Result, TokensUsed: out.Usage.TokensUsed, Charged: out.Charged, Replayed: out.Replayed}
	if len(resp.Output) == 0 {
		resp.Output = json.RawMessage("null")
	}
	if out.Usage.Known {
		resp.Cost = &money.Amount{Units: out.Usage.CostUnits, Currency: out.Usage.Currency}
	}
	writeJSON(w, http.StatusOK, resp)
}

// toCall builds the gateway's call: the operator's context wins, and the
// run is the proxy's. A run id the agent sends is not believed: per_run
// limits keyed by it would reset whenever the agent sent a new one, so
// agent_run_id is overwritten with the run the proxy is bound to (its
// --run-id, else one run per proxy).
func (p *Proxy) toCall(req *Request) *check.Call {
	ctx := policy.OverlayContext(req.Context, p.ctx)
	ctx["agent_run_id"] = p.runID
	return &check.Call{Tool: req.Tool, Args: req.Args, Context: ctx, RunID: p.runID}
}

// ToolInfo is one entry of GET /v1/tools.
type ToolInfo struct {
	Name        string `json:"name"`
	Capability  string `json:"capability"`
	Category    string `json:"category,omitempty"`
	SideEffects string `json:"side_effects,omitempty"`
}

func (p *Proxy) list(w http.ResponseWriter) {
	pl := p.gw.Pipeline()
	disabled := map[string]bool{}
	for _, s := range pl.Status() {
		if s.Disabled != "" {
			disabled[s.Name] = true
		}
	}
	out := []ToolInfo{}
	for _, name := range pl.Tools() {
		t, _ := pl.Tool(name)
		if disabled[name] || !p.tools.Provides(name) || !pl.Declared(name) {
			continue
		}
		out = append(out, ToolInfo{Name: name, Capability: t.CapabilityCode(), Category: string(t.Category), SideEffects: string(t.SideEffects)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

func errNoProvider(tool string) error {
	return fmtNotDispatched(toolerr.New(toolerr.InternalError, "no_provider",
		"%s is declared but no plugin provides it (add a plugin named %s whose capabilities list its capability)", tool, tool))
}

var status = map[toolerr.Class]int{
	toolerr.CapabilityMissing: http.StatusForbidden,
	toolerr.Restricted:        http.StatusForbidden,
	toolerr.InvalidArgs:       http.StatusBadRequest,
	toolerr.Timeout:           http.StatusGatewayTimeout,
	toolerr.SandboxViolation:  http.StatusForbidden,
	toolerr.InternalError:     http.StatusInternalServerError,
}

func writeErr(w http.ResponseWriter, e *toolerr.Error) {
	s, ok := status[e.Class]
	if !ok {
		s = http.StatusInternalServerError
	}
	writeJSON(w, s, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// invoke reaches a tool the gateway calls itself (a lookup, a rollback).
func (p *Proxy) invoke(ctx context.Context, c *check.Call) (gateway.Outcome, error) {
	if !p.tools.Provides(c.Tool) {
		return gateway.Outcome{}, errNoProvider(c.Tool)
	}
	return p.tools.Invoke(ctx, c)
}
