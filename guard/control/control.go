package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/policy"
)

var (
	ErrRefused     = errors.New("gateway refused")
	ErrUnreachable = errors.New("no gateway on the control socket")
)

// Rollbacker runs the compensations of a run whose session was killed
// (gateway.Gateway.Rollback).
type Rollbacker func(ctx context.Context, run, reason string) ([]gateway.RollbackResult, error)

// ServeOption configures Serve.
type ServeOption func(*serveConfig)

type serveConfig struct {
	rollback Rollbacker
	ledger   *ledgerServer // WithLedger
}

// WithRollback serves POST /runs/{run}/rollback: a killed session's run is
// compensated (klock tools rollback, klock run --gateway).
func WithRollback(r Rollbacker) ServeOption { return func(c *serveConfig) { c.rollback = r } }

// Serve listens on the unix socket at path until ctx ends. A stale socket
// file (no one listening) is replaced; a live one is an error.
func Serve(ctx context.Context, path string, p *check.Pipeline, opts ...ServeOption) (func(), error) {
	var cfg serveConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: another gateway is running for this agent", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: handler(p, cfg), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	stop := func() { srv.Close(); os.Remove(path) }
	go func() { <-ctx.Done(); stop() }()
	return stop, nil
}

func handler(p *check.Pipeline, cfg serveConfig) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, err error) {
		code := http.StatusBadRequest
		if errors.Is(err, check.ErrUnknownTool) {
			code = http.StatusNotFound
		}
		reply(w, code, map[string]string{"error": err.Error()})
	}
	mux.HandleFunc("GET /tools", func(w http.ResponseWriter, r *http.Request) { reply(w, 200, p.Status()) })
	mux.HandleFunc("POST /tools/{name}/disable", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Reason string }
		_ = json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body)
		if err := p.Disable(r.PathValue("name"), body.Reason); err != nil {
			fail(w, err)
			return
		}
		reply(w, 200, map[string]string{"tool": r.PathValue("name"), "state": "disabled"})
	})
	mux.HandleFunc("POST /tools/{name}/enable", func(w http.ResponseWriter, r *http.Request) {
		if err := p.Enable(r.PathValue("name")); err != nil {
			fail(w, err)
			return
		}
		reply(w, 200, map[string]string{"tool": r.PathValue("name"), "state": "enabled"})
	})
	mux.HandleFunc("POST /tools/{name}/limit", func(w http.ResponseWriter, r *http.Request) {
		// Only the windows named change: a limit set earlier on
		// another window stays.
		var ch check.LimitChange
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ch); err != nil {
			fail(w, fmt.Errorf("limits: %w", err))
			return
		}
		if err := p.ChangeLimits(r.PathValue("name"), ch); err != nil {
			fail(w, err)
			return
		}
		var now policy.RateLimits
		for _, s := range p.Status() {
			if s.Name == r.PathValue("name") {
				now = s.Limits
			}
		}
		reply(w, 200, map[string]any{"tool": r.PathValue("name"), "limits": now})
	})
	if cfg.ledger != nil {
		cfg.ledger.register(mux)
	}
	if cfg.rollback != nil {
		mux.HandleFunc("POST /runs/{run}/rollback", func(w http.ResponseWriter, r *http.Request) {
			var body struct{ Reason string }
			_ = json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body)
			if body.Reason == "" {
				body.Reason = "rollback requested on the control socket"
			}
			// The compensations run even if the requester goes away: a
			// half-run rollback is worse than a late answer.
			res, err := cfg.rollback(context.WithoutCancel(r.Context()), r.PathValue("run"), body.Reason)
			out := RollbackReply{Run: r.PathValue("run"), Results: res}
			if err != nil {
				out.Incomplete = err.Error()
			}
			reply(w, 200, out)
		})
	}
	return mux
}

// RollbackReply is the answer to a rollback request: every compensation's
// outcome, and what was not undone.
type RollbackReply struct {
	Run        string                   `json:"run"`
	Results    []gateway.RollbackResult `json:"results"`
	Incomplete string                   `json:"incomplete,omitempty"`
}

// Client talks to one gateway's control socket.
type Client struct {
	path string
	hc   *http.Client
}

// Dial returns a client for the socket at path.
func Dial(path string) *Client {
	return &Client{path: path, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}}
}

func (c *Client) do(method, url string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytesReader(b)
	}
	req, _ := http.NewRequest(method, "http://gateway"+url, rd)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w %s: %v (is `klock mcp` running for this agent?)", ErrUnreachable, c.path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		var e struct{ Error string }
		_ = json.Unmarshal(data, &e)
		return fmt.Errorf("%w: %s", ErrRefused, e.Error)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Status lists the tools and their governance state.
func (c *Client) Status() ([]check.ToolStatus, error) {
	var out []check.ToolStatus
	return out, c.do("GET", "/tools", nil, &out)
}

// Disable disables a tool.
func (c *Client) Disable(name, reason string) error {
	return c.do("POST", "/tools/"+name+"/disable", map[string]string{"reason": reason}, nil)
}

// Enable enables a tool.
func (c *Client) Enable(name string) error { return c.do("POST", "/tools/"+name+"/enable", nil, nil) }

// Limit narrows the windows ch names and returns the limits now in force
// (the lower of the manifest's and governance's, per window).
func (c *Client) Limit(name string, ch check.LimitChange) (policy.RateLimits, error) {
	var out struct {
		Limits policy.RateLimits `json:"limits"`
	}
	err := c.do("POST", "/tools/"+name+"/limit", ch, &out)
	return out.Limits, err
}

// Rollback asks the gateway to run the compensations of run's
// REVERSIBLE-WRITE calls (its session was killed, reason). It returns the
// outcomes, and an error wrapping gateway.ErrRollback when any was not
// undone.
func (c *Client) Rollback(run, reason string) (RollbackReply, error) {
	var out RollbackReply
	// Each compensation runs with its tool's timeout: wait for them all.
	long := &Client{path: c.path, hc: &http.Client{Timeout: 10 * time.Minute, Transport: c.hc.Transport}}
	if err := long.do("POST", "/runs/"+url.PathEscape(run)+"/rollback", map[string]string{"reason": reason}, &out); err != nil {
		return out, err
	}
	if out.Incomplete != "" {
		return out, fmt.Errorf("%w: %s", gateway.ErrRollback, out.Incomplete)
	}
	return out, nil
}
