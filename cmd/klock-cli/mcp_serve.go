package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/guard/mcpproxy"
	"github.com/klocklabs/klock/policy"
)

func serveHTTP(ctx context.Context, p *mcpproxy.Proxy, listen, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &exitError{code: exitUsage, err: fmt.Errorf("--upstream %q: want the server's endpoint URL, e.g. http://127.0.0.1:3001/mcp", upstream)}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return &exitError{code: exitNoStart, err: fmt.Errorf("--listen: %w", err)}
	}
	srv := &http.Server{Handler: p.HTTPHandler(u), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "klock mcp: proxying http://%s -> %s\n", ln.Addr(), u)
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return &exitError{code: exitNoStart, err: err}
	}
	return nil
}

// serveEnforced runs the MCP server as a klock session under the manifest:
// its file, exec and network scope is the manifest's intents, walled by the
// kernel, so a server whose tools reach past their contract is stopped by
// the kernel even when the gateway's checks are bypassed.
// enforcedServer is the server of klock mcp --enforce: its session id, the
// --user it runs as ("" for the default) and its command.
type enforcedServer struct {
	id, user string
	args     []string
}

// data are the manifest's bytes as the gateway admitted them (never read
// again: the file could have changed since).
func serveEnforced(ctx context.Context, p *mcpproxy.Proxy, m *policy.Manifest, path string, data []byte, srv enforcedServer) error {
	if os.Geteuid() != 0 {
		return &exitError{code: exitNoStart, err: errors.New("--enforce needs root: it starts a kernel-enforced session (sudo klock mcp --enforce ...)")}
	}
	cred, err := credential(srv.user, m.Workdir)
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	// Real pipes: the session hands its ends to the server process itself.
	toServerR, toServerW, err := os.Pipe()
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	fromServerR, fromServerW, err := os.Pipe()
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		res *session.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := session.Run(sctx, session.Options{
			Manifest: m, ManifestPath: path, ManifestData: data, ID: srv.id,
			Command: srv.args, Env: agentEnv(nil), User: cred,
			Stdin: toServerR, Stdout: fromServerW, Stderr: os.Stderr,
			Snapshot: session.Backup(os.Stderr),
		})
		if res != nil && res.Killed && !res.Interrupted {
			why := res.Reason
			if res.Violation != nil {
				why = res.Violation.Error()
			}
			p.ServerStopped(why) // before the close: calls cut short by it say why
		}
		fromServerW.Close() // the proxy sees the server's end
		done <- result{res, err}
	}()
	perr := p.ServeStdio(ctx, os.Stdin, os.Stdout, toServerW, fromServerR)
	toServerW.Close() // EOF: a stdio server exits
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		cancel()
		r = <-done
	}
	toServerR.Close()
	fromServerR.Close()
	if r.err != nil {
		return &exitError{code: exitNoStart, err: fmt.Errorf("enforced MCP server: %w", r.err)}
	}
	if r.res != nil && r.res.Killed {
		msg := r.res.Reason
		if r.res.Violation != nil {
			msg = r.res.Violation.Error()
		}
		slog.Error("klock mcp: the MCP server broke its scope and was stopped", "reason", msg, "log", r.res.LogPath)
		return &exitError{code: exitViolation, err: errors.New(msg)}
	}
	if perr != nil {
		return &exitError{code: exitNoStart, err: perr}
	}
	return nil
}
