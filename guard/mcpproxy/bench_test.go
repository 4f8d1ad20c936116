package mcpproxy

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text"`
}

func echoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echo"}, func(ctx context.Context, r *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "secret", Description: "undeclared"}, func(ctx context.Context, r *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "leaked"}}}, nil, nil
	})
	return s
}

// pipeTransport is one end of a stdio-like byte stream.
func pipeTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	return &mcp.IOTransport{Reader: r, Writer: w}
}

// session connects the official Go SDK client to the echo server, through
// the proxy when p is not nil, over newline-delimited JSON byte streams.
func session(t testing.TB, p *Proxy) *mcp.ClientSession {
	t.Helper()
	return serverSession(t, echoServer(), p)
}

// serverSession is session with another server.
func serverSession(t testing.TB, srv *mcp.Server, p *Proxy) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// client <-> [proxy] <-> server
	cr, pw := io.Pipe() // to client
	pr, cw := io.Pipe() // from client
	var srvIn io.ReadCloser = pr
	var srvOut io.WriteCloser = pw
	if p != nil {
		sr, xw := io.Pipe() // proxy -> server
		xr, sw := io.Pipe() // server -> proxy
		go p.ServeStdio(ctx, pr, pw, xw, xr)
		srvIn, srvOut = sr, sw
	}
	if _, err := srv.Connect(ctx, pipeTransport(srvIn, srvOut), nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, pipeTransport(cr, cw), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestProxyInProcess(t *testing.T) {
	cs := session(t, testProxy(t))
	ctx := context.Background()
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Tools) != 1 || tl.Tools[0].Name != "echo" {
		t.Fatalf("tools/list through the proxy: %+v", tl.Tools)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || r.IsError || r.Content[0].(*mcp.TextContent).Text != "hi" {
		t.Fatalf("echo: %v %+v", err, r)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "secret", Arguments: map[string]any{"text": "x"}})
	if err != nil || !r.IsError || r.Content[0].(*mcp.TextContent).Text == "leaked" {
		t.Fatalf("undeclared call through the proxy: %v %+v", err, r)
	}
	// A ping (a method the proxy does not look at) passes through.
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkToolsCall measures one tools/call from the official Go SDK client
// to a Go SDK echo server, directly and through the proxy (full gateway:
// checks, fsynced hash-chained audit of two records per call). It reports
// the median of each and their difference: the proxy's overhead per call.
func BenchmarkToolsCall(b *testing.B) { benchToolsCall(b, true) }

// BenchmarkToolsCallAuditNoSync is the same without the audit's fsyncs: the
// difference to BenchmarkToolsCall is what durability costs per call on
// this disk (the gateway itself always fsyncs).
func BenchmarkToolsCallAuditNoSync(b *testing.B) { benchToolsCall(b, false) }

func benchToolsCall(b *testing.B, sync bool) {
	direct := session(b, nil)
	proxied := session(b, testProxySync(b, sync))
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	run := func(cs *mcp.ClientSession) time.Duration {
		t0 := time.Now()
		r, err := cs.CallTool(ctx, params)
		if err != nil || r.IsError {
			b.Fatalf("call: %v %+v", err, r)
		}
		return time.Since(t0)
	}
	for i := 0; i < 50; i++ { // warm up both paths
		run(direct)
		run(proxied)
	}
	var d, p []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Interleave so both paths see the same machine load.
		d = append(d, run(direct))
		p = append(p, run(proxied))
	}
	md, mp := median(d), median(p)
	b.ReportMetric(float64(md.Microseconds()), "direct-median-µs")
	b.ReportMetric(float64(mp.Microseconds()), "proxied-median-µs")
	b.ReportMetric(float64((mp - md).Microseconds()), "overhead-median-µs")
}
