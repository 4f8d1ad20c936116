package mcpproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// HTTPHandler proxies MCP's streamable HTTP transport to upstream (the
// server's endpoint URL). GET (the server's event stream), DELETE (session
// end) and every POST that holds no tools/list or tools/call go through a
// plain reverse proxy, unchanged.
func (p *Proxy) HTTPHandler(upstream *url.URL) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.URL.Path, r.Out.URL.RawPath = upstream.Path, upstream.RawPath
			r.Out.Host = upstream.Host
			setActsAs(r.Out.Header, "") // only a checked tools/call carries one
		},
		FlushInterval: -1, // SSE: flush every event
	}
	client := &http.Client{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			rp.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxFrame+1))
		if err != nil || len(body) > maxFrame {
			writeJSON(w, http.StatusBadRequest, nil, errorResponse(nil, -32700, "request body unreadable or over 16 MiB"))
			return
		}
		msgs, batch, err := parseFrame(body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, nil, errorResponse(nil, -32700, err.Error()))
			return
		}
		var target *message
		for i := range msgs {
			if msgs[i].isRequest() && (msgs[i].Method == "tools/call" || msgs[i].Method == "tools/list") {
				target = &msgs[i]
			}
		}
		if target == nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			rp.ServeHTTP(w, r)
			return
		}
		if batch {
			writeJSON(w, http.StatusBadRequest, nil, errorResponse(nil, -32600,
				"klock: a JSON-RPC batch holding tools/call or tools/list cannot be checked; send them one per request (batching left MCP in 2025-06-18)"))
			return
		}
		x := &exchange{client: client, upstream: upstream, in: r, body: body, w: w, id: target.ID}
		if target.Method == "tools/list" {
			resp, err := x.send(r.Context())
			switch {
			case err != nil:
				x.finish(errorResponse(target.ID, -32603, "klock: upstream: "+err.Error()))
			case len(resp.Result) > 0:
				x.finish(response(resp.ID, p.filterList(resp.Result)))
			default:
				x.finish(x.raw)
			}
			return
		}
		x.body, x.actsAs = p.stamp(body), p.callee(*target)
		x.finish(p.call(r.Context(), *target, func(ctx context.Context) (message, error) {
			// The gateway may have replaced arguments (confidential
			// handles): re-encode, then stamp the identity again.
			body, err := withToolArgs(ctx, *target, x.body)
			if err != nil {
				return message{}, err
			}
			x.body = p.stamp(body)
			return x.send(ctx)
		}, p.httpInvoker(client, upstream, r)))
	})
}

// exchange is one intercepted POST: the upstream request, and the response
// to the client, which becomes an SSE stream when the upstream answers with
// one (its other events are relayed as they come).
type exchange struct {
	client   *http.Client
	upstream *url.URL
	in       *http.Request
	body     []byte
	w        http.ResponseWriter
	id       json.RawMessage
	sse      bool
	raw      []byte // the upstream's response frame, as received
	upHeader http.Header
	actsAs   string // HeaderActsAs of a tools/call
}

var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Host": true, "Accept-Encoding": true}

func (x *exchange) send(ctx context.Context) (message, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.upstream.String(), bytes.NewReader(x.body))
	if err != nil {
		return message{}, err
	}
	for k, v := range x.in.Header {
		if !hopHeaders[k] {
			req.Header[k] = v
		}
	}
	setActsAs(req.Header, x.actsAs)
	resp, err := x.client.Do(req)
	if err != nil {
		return message{}, fmt.Errorf("upstream: %w", err)
	}
	defer resp.Body.Close()
	x.upHeader = resp.Header
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return message{}, fmt.Errorf("upstream answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if strings.HasPrefix(ct, "text/event-stream") {
		return x.relaySSE(resp.Body)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFrame))
	if err != nil {
		return message{}, fmt.Errorf("upstream: %w", err)
	}
	m, err := parseMessage(b)
	if err != nil {
		return message{}, fmt.Errorf("upstream: %w", err)
	}
	x.raw = b
	return m, nil
}

// relaySSE relays events to the client until the one that answers x.id,
// which it returns (the caller writes the checked version of it last).
func (x *exchange) relaySSE(body io.Reader) (message, error) {
	x.startSSE()
	br := bufio.NewReaderSize(body, 64<<10)
	var event []string
	var data bytes.Buffer
	for {
		line, err := br.ReadString('\n')
		if err != nil && line == "" {
			return message{}, fmt.Errorf("upstream event stream ended before the response: %w", errors.Join(err, io.ErrUnexpectedEOF))
		}
		trimmed := strings.TrimRight(line, "\r\n")
		if trimmed != "" {
			event = append(event, trimmed)
			if d, ok := strings.CutPrefix(trimmed, "data:"); ok {
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(strings.TrimPrefix(d, " "))
			}
			continue
		}
		if len(event) == 0 {
			continue
		}
		if m, perr := parseMessage(data.Bytes()); perr == nil && m.isResponse() && idKey(m.ID) == idKey(x.id) {
			x.raw = append([]byte(nil), data.Bytes()...)
			return m, nil
		}
		fmt.Fprintf(x.w, "%s\n\n", strings.Join(event, "\n"))
		x.flush()
		event, data = event[:0], bytes.Buffer{}
	}
}

func (x *exchange) startSSE() {
	if x.sse {
		return
	}
	x.sse = true
	h := x.w.Header()
	copySessionHeaders(h, x.upHeader)
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	x.flush()
}

func (x *exchange) flush() {
	if f, ok := x.w.(http.Flusher); ok {
		f.Flush()
	}
}

// finish writes the response frame: as the stream's last event when the
// upstream streamed, else as a JSON body.
func (x *exchange) finish(frame []byte) {
	if x.sse {
		fmt.Fprintf(x.w, "event: message\ndata: %s\n\n", frame)
		x.flush()
		return
	}
	writeJSON(x.w, http.StatusOK, x.upHeader, frame)
}

func copySessionHeaders(dst, src http.Header) {
	for k, v := range src {
		if strings.HasPrefix(k, "Mcp-") {
			dst[k] = v
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, upstream http.Header, frame []byte) {
	copySessionHeaders(w.Header(), upstream)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(frame)
}
