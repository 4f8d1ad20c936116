package leaseapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// DefaultSocket is where klockd serves the API; SocketEnv overrides it
// for clients.
const (
	DefaultSocket = "/run/klock/api.sock"
	SocketEnv     = "KLOCK_API_SOCKET"
)

// SocketPath is the socket clients use: $KLOCK_API_SOCKET, else
// DefaultSocket.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}

// Client speaks the API (over klockd's unix socket, or TCP with a token).
// It keeps connections alive; it is safe for concurrent use.
type Client struct {
	hc    *http.Client
	base  string
	token string
	where string // for messages: the socket or the URL
}

// maxAnswer bounds an answer the client reads.
const maxAnswer = 64 << 20

// Dial returns a client of the API on the unix socket path ("" is
// SocketPath()). It connects on the first call; a socket nobody serves is
// then an error matching ErrNoServer.
func Dial(path string) *Client {
	if path == "" {
		path = SocketPath()
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", path) },
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &Client{hc: &http.Client{Transport: tr}, base: "http://klockd", where: path}
}

// NewTCP returns a client of the API at baseURL ("https://host:port"),
// authenticated by token; tlsConfig may be nil (the system's roots).
func NewTCP(baseURL, token string, tlsConfig *tls.Config) *Client {
	tr := &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	return &Client{hc: &http.Client{Transport: tr}, base: strings.TrimRight(baseURL, "/"), token: token, where: baseURL}
}

// Close drops the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// request sends one request; the answer's body is the caller's to close.
func (c *Client) request(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.dialError(err)
	}
	return resp, nil
}

// dialError explains a failure to reach the server.
func (c *Client) dialError(err error) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: nothing serves it at %s (start klockd, or set $%s to its --api-socket)", ErrNoServer, c.where, SocketEnv)
	case errors.Is(err, syscall.EACCES):
		return &Error{Class: ClassForbidden, Message: fmt.Sprintf("%s: permission denied: the socket is root's and the klock group's (run as root, or as a member of that group)", c.where)}
	}
	return fmt.Errorf("%w: %v", ErrNoServer, err)
}

// do sends in and decodes a 2xx answer into out; any other answer is an
// *Error.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.request(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return answerError(resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("leaseapi: %s %s: the answer is not what the API documents: %v", method, path, err)
	}
	return nil
}

func answerError(status int, b []byte) error {
	e := &Error{}
	if err := json.Unmarshal(b, e); err != nil || e.Class == "" {
		e = &Error{Class: ClassInternal, Message: fmt.Sprintf("HTTP %d: %s", status, bytes.TrimSpace(b))}
	}
	e.Status = status
	return e
}

// Acquire asks for a manifest's leases. GRANTED, DIE and WAIT are answers
// (Outcome), not errors; an error is a request klockd refused.
func (c *Client) Acquire(ctx context.Context, req ManifestRequest) (*ManifestResponse, error) {
	resp, err := c.request(ctx, http.MethodPost, "/v1/manifest", req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		return nil, answerError(resp.StatusCode, b)
	}
	out := &ManifestResponse{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("leaseapi: the manifest answer is not what the API documents: %v", err)
	}
	return out, nil
}

// Heartbeat renews the targets' leases.
func (c *Client) Heartbeat(ctx context.Context, t Targets) (*HeartbeatResponse, error) {
	out := &HeartbeatResponse{}
	return out, c.do(ctx, http.MethodPost, "/v1/leases/heartbeat", t, out)
}

// Release frees the targets' leases and returns how many.
func (c *Client) Release(ctx context.Context, t Targets) (int, error) {
	var out ReleaseResponse
	err := c.do(ctx, http.MethodPost, "/v1/leases/release", t, &out)
	return out.Released, err
}

// Reconcile compares the lease ids in t with what the caller holds.
func (c *Client) Reconcile(ctx context.Context, t Targets) (*ReconcileResponse, error) {
	out := &ReconcileResponse{}
	return out, c.do(ctx, http.MethodPost, "/v1/leases/reconcile", t, out)
}

// Revoke frees a lease, or every lease of a session, by id.
func (c *Client) Revoke(ctx context.Context, id string) (int, error) {
	var out RevokeResponse
	err := c.do(ctx, http.MethodPost, "/v1/leases/revoke", RevokeRequest{ID: id}, &out)
	return out.Revoked, err
}

// List returns the leases the caller may see (of session, when set).
func (c *Client) List(ctx context.Context, session string) ([]Lease, error) {
	var out ListResponse
	path := "/v1/leases"
	if session != "" {
		path += "?session=" + url.QueryEscape(session)
	}
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out.Leases, err
}

// State returns the visible leases overlapping a KLIS object.
func (c *Client) State(ctx context.Context, object string) (*StateResponse, error) {
	out := &StateResponse{}
	return out, c.do(ctx, http.MethodGet, "/v1/resource/"+url.PathEscape(object)+"/state", nil, out)
}

// Contention returns recent contention and the requests waiting now.
func (c *Client) Contention(ctx context.Context) (*ContentionResponse, error) {
	out := &ContentionResponse{}
	return out, c.do(ctx, http.MethodGet, "/v1/contention", nil, out)
}

// EventStream reads GET /v1/events.
type EventStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// Events opens the event stream; it is open (subscribed) when Events
// returns.
func (c *Client) Events(ctx context.Context) (*EventStream, error) {
	resp, err := c.request(ctx, http.MethodGet, "/v1/events", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		return nil, answerError(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxAnswer)
	return &EventStream{body: resp.Body, sc: sc}, nil
}

// Next returns the next event (io.EOF when the stream ended).
func (s *EventStream) Next() (Event, error) {
	var data []byte
	for s.sc.Scan() {
		line := s.sc.Bytes()
		switch {
		case len(line) == 0:
			if data == nil {
				continue
			}
			var ev Event
			if err := json.Unmarshal(data, &ev); err != nil {
				return ev, fmt.Errorf("leaseapi: event: %v", err)
			}
			return ev, nil
		case line[0] == ':':
		default:
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, io.EOF
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }
