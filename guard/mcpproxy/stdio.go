package mcpproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// maxFrame bounds one newline-delimited frame (16 MiB): a larger one is a
// protocol error, not a reason to grow memory without bound.
const maxFrame = 16 << 20

// lineWriter writes whole frames, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := make([]byte, 0, len(b)+1)
	buf = append(append(buf, b...), '\n')
	_, err := l.w.Write(buf)
	return err
}

// stdioSession is one client connected to one server over stdio streams.
type stdioSession struct {
	p      *Proxy
	client *lineWriter
	server *lineWriter
	mu     sync.Mutex
	lists  map[string]bool         // tools/list ids awaiting their response
	calls  map[string]chan message // dispatched tools/call ids
	late   map[string]bool         // ids of calls given up on: drop their late response
	closed chan struct{}
	wg     sync.WaitGroup
}

// ServeStdio proxies between a client (clientIn/clientOut) and a server
// (serverIn is the server's stdin, serverOut its stdout) until the client's
// input or the server's output ends. In-flight calls are answered before it
// returns.
func (p *Proxy) ServeStdio(ctx context.Context, clientIn io.Reader, clientOut io.Writer, serverIn io.Writer, serverOut io.Reader) error {
	s := &stdioSession{
		p: p, client: &lineWriter{w: clientOut}, server: &lineWriter{w: serverIn},
		lists: map[string]bool{}, calls: map[string]chan message{}, late: map[string]bool{}, closed: make(chan struct{}),
	}
	// Compensations journaled before a restart reach their tools through
	// this session's server.
	p.gw.SetInvoker(s.invoker())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serverDone := make(chan error, 1)
	go func() { serverDone <- s.readServer(serverOut) }()
	clientDone := make(chan error, 1)
	go func() { clientDone <- s.readClient(ctx, clientIn) }()
	var err error
	select {
	case err = <-clientDone:
		// The client hung up: let in-flight calls finish (they are bounded
		// by their contract's timeout), then stop.
		s.wg.Wait()
	case err = <-serverDone:
		close(s.closed)
		cancel()
		s.wg.Wait()
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

func scanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxFrame)
	return sc
}

func (s *stdioSession) readClient(ctx context.Context, r io.Reader) error {
	sc := scanner(r)
	for sc.Scan() {
		frame := sc.Bytes()
		if len(frame) == 0 {
			continue
		}
		if err := s.fromClient(ctx, append([]byte(nil), frame...)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client stream: %w", err)
	}
	return io.EOF
}

func (s *stdioSession) fromClient(ctx context.Context, frame []byte) error {
	msgs, batch, err := parseFrame(frame)
	if err != nil {
		return s.client.write(errorResponse(nil, -32700, err.Error()))
	}
	intercept := false
	for _, m := range msgs {
		if m.isRequest() && (m.Method == "tools/call" || m.Method == "tools/list") {
			intercept = true
		}
	}
	if !intercept {
		return s.server.write(frame) // untouched, batch or not
	}
	if batch {
		// JSON-RPC batches left MCP in 2025-06-18; split one that holds a
		// call we must check into single messages.
		var raws []json.RawMessage
		_ = json.Unmarshal(frame, &raws)
		for i, m := range msgs {
			if err := s.one(ctx, m, raws[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return s.one(ctx, msgs[0], frame)
}

func (s *stdioSession) one(ctx context.Context, m message, raw []byte) error {
	switch {
	case m.isRequest() && m.Method == "tools/list":
		s.mu.Lock()
		s.lists[idKey(m.ID)] = true
		s.mu.Unlock()
		return s.server.write(raw)
	case m.isRequest() && m.Method == "tools/call":
		raw = s.p.stamp(raw)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			out := s.p.call(ctx, m, func(ctx context.Context) (message, error) {
				raw, err := withToolArgs(ctx, m, raw)
				if err != nil {
					return message{}, err
				}
				// Re-encoded from the call as the agent sent it: the
				// identity is stamped again.
				return s.dispatch(ctx, m, s.p.stamp(raw))
			}, s.invoker())
			_ = s.client.write(out)
		}()
		return nil
	default:
		return s.server.write(raw)
	}
}

// dispatch forwards a checked tools/call and waits for its response. On a
// deadline it tells the server to cancel (notifications/cancelled) and
// drops the late response.
func (s *stdioSession) dispatch(ctx context.Context, m message, raw []byte) (message, error) {
	k := idKey(m.ID)
	ch := make(chan message, 1)
	s.mu.Lock()
	if _, dup := s.calls[k]; dup {
		s.mu.Unlock()
		return message{}, fmt.Errorf("a tools/call with id %s is already in flight", m.ID)
	}
	s.calls[k] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.calls, k)
		s.mu.Unlock()
	}()
	if err := s.server.write(raw); err != nil {
		return message{}, fmt.Errorf("forward to server: %w", err)
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-s.closed:
		return message{}, s.p.closedErr()
	case <-ctx.Done():
		// The server's end cancels ctx too, and select picks at random
		// between ready cases: a closed server is why, and is not written
		// to (nobody reads its input any more).
		select {
		case <-s.closed:
			return message{}, s.p.closedErr()
		default:
		}
		s.mu.Lock()
		s.late[k] = true
		s.mu.Unlock()
		note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
			"params": map[string]any{"requestId": m.ID, "reason": "klock: deadline of the tool's contract passed"}})
		_ = s.server.write(note)
		return message{}, ctx.Err()
	}
}

func (s *stdioSession) readServer(r io.Reader) error {
	sc := scanner(r)
	for sc.Scan() {
		frame := sc.Bytes()
		if len(frame) == 0 {
			continue
		}
		if err := s.fromServer(append([]byte(nil), frame...)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("server stream: %w", err)
	}
	return io.EOF
}

func (s *stdioSession) fromServer(frame []byte) error {
	m, err := parseMessage(frame)
	if err != nil || !m.isResponse() {
		return s.client.write(frame) // notifications, server requests, batches: untouched
	}
	k := idKey(m.ID)
	s.mu.Lock()
	ch, isCall := s.calls[k]
	if isCall {
		delete(s.calls, k)
	}
	isList, isLate := s.lists[k], s.late[k]
	delete(s.lists, k)
	delete(s.late, k)
	s.mu.Unlock()
	switch {
	case isLate && !isCall:
		return nil // the client already has its tool_timeout
	case isCall:
		ch <- m
		return nil
	case isList && len(m.Result) > 0:
		return s.client.write(response(m.ID, s.p.filterList(m.Result)))
	default:
		return s.client.write(frame)
	}
}
