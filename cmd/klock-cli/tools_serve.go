package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/guard/plugin"
	"github.com/klocklabs/klock/guard/toolproxy"
	"github.com/spf13/cobra"
)

// toolsServeOptions are klock tools serve's flags; run is the command.
type toolsServeOptions struct {
	f               gatewayFlags
	listen, plugins string
}

func newToolsServe() *cobra.Command {
	o := &toolsServeOptions{}
	c := &cobra.Command{
		Use:   "serve -m MANIFEST --listen ADDR --plugins DIR",
		Short: "Serve the HTTP tool proxy: declared tools, provided by plugins run under kernel enforcement",
		Long: `serve runs seed 004's HTTP tool proxy for tools that do not speak MCP.

  POST /v1/tools/call  {"tool":"greet","args":{...},"context":{"team_id":"t1"}}
    -> {"ok":true,"output":...,"tokens_used":12,"cost":{"units":1,"currency":"USD"},"charged":{...}}
    -> {"ok":false,"error_class":"tool_capability_missing","retryable":false,"message":...}
  GET  /v1/tools       the tools the agent may call now

Each call passes the same gateway as klock mcp: declared tool and capability,
category defaults, input_schema and must_match bindings (from the request's
context; --context keys win), rate limits, idempotency, side effects and
autonomy, human approval (klock approvals / approve / deny), leases on what
the tool touches for the call's duration (touches:, else the workdir;
--lease-wait), the budget of the manifest's grants (signed receipts in
--receipts), and the audit log.
Every call belongs to this process's run (--run-id, else a new one): a
request's agent_run_id is replaced by it, so an agent cannot reset per_run
limits by naming a new run.

Tools are plugins: each subdirectory of --plugins holding a plugin.json
  {"name":"greet","version":"1.0.0","entry":"greet.sh",
   "capabilities":["tool.greet.invoke"],
   "permissions":{"network":false,"filesystem":false}}
serves the declared tool of its name. Every call runs the entry once as a
klock session (strict mode, user nobody): it may read its own directory and
the system libraries, execute only its entry (and its #! interpreter), write
nothing and reach no network, unless permissions name paths
("filesystem":{"read":[...],"write":[...]}), destinations
("network":["host:443/tcp"]) or programs ("exec":["/usr/bin/jq"]). A
#!/bin/sh entry that starts another program is stopped, and a plugin launches
no shell: exec may not list one, and the entry's #! shell runs once, as its
interpreter (sh -c, bash -c, a system() call kill the session). A plugin that
reaches past that is stopped by the kernel and the call returns
tool_sandbox_violation. The entry reads {"tool","args","context"} on stdin
(context.acts_as: the contract's permission.acts_as)
and writes {"output":...,"tokens_used":N,"cost":"0.01 USD"} (or {"error":...})
on stdout; a "breakdown" of named amounts ({"compute":"0.01 USD",...}) is
charged as its sum and recorded in the receipt. Plugins need root (kernel enforcement); without it serve refuses
to start.

klock tools list/disable/enable/limit --agent ID govern it while it runs.

Exit status: 0 stopped by a signal, 1 the manifest or a plugin is invalid,
125 the proxy could not start (the message says why).`,
		Example: `  sudo klock tools serve -m agent.yaml --listen 127.0.0.1:8810 --plugins ./plugins
  curl -s localhost:8810/v1/tools/call -d '{"tool":"greet","args":{"who":"ada"},"context":{"agent_run_id":"ar_1"}}'
  klock tools disable --agent my-agent-01 greet --reason "incident 12"
  klock receipts verify /srv/agent/.klock/receipts`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	o.f.register(c)
	c.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8810", "address to serve the tool proxy on")
	c.Flags().StringVar(&o.plugins, "plugins", "", "directory of plugins, one subdirectory with a plugin.json each (required)")
	_ = c.MarkFlagRequired("plugins")
	return c
}

// run loads the plugins, opens the gateway and serves the HTTP tool proxy
// until SIGINT or SIGTERM; plugins need root, as they run under kernel
// enforcement.
func (o *toolsServeOptions) run(cmd *cobra.Command, _ []string) error {
	callCtx, err := parseContext(o.f.context)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ps, err := plugin.LoadDir(o.plugins)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	if len(ps) > 0 && os.Geteuid() != 0 {
		return &exitError{code: exitNoStart, err: errors.New("plugins run only under kernel enforcement, which needs root: sudo klock tools serve ...")}
	}
	ctx, m, gw, closeGW, err := o.f.start(cmd.Context())
	if err != nil {
		return err
	}
	defer closeGW()
	var shared *session.Shared
	if len(ps) > 0 {
		shared = session.LoadShared(observe.Options{})
		defer shared.Close()
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	runner := &plugin.Runner{StateDir: filepath.Join(o.f.stateDir, "gateway", m.Agent.ID, "plugins"), Shared: shared, Leases: o.f.leases, Log: log}
	pl := gw.Pipeline()
	prov, err := plugin.NewProvider(ps, pl.Tool, runner)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	var missing []string
	for _, name := range pl.Tools() {
		if !prov.Provides(name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		log.Warn("klock tools serve: declared tools no plugin provides (their calls get tool_internal_error no_provider)", "tools", strings.Join(missing, ","))
	}
	var opts []toolproxy.Option
	if len(callCtx) > 0 {
		opts = append(opts, toolproxy.WithContext(callCtx))
	}
	// The run is this process's (or --run-id), never the one a
	// request names: per_run must not reset when the agent asks.
	opts = append(opts, toolproxy.WithRunID(o.f.runID))
	px := toolproxy.New(gw, prov, opts...)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return &exitError{code: exitNoStart, err: fmt.Errorf("--listen: %w", err)}
	}
	log.Info("klock tools serve: listening", "addr", "http://"+ln.Addr().String(), "agent", m.Agent.ID, "plugins", strings.Join(prov.Served(), ","))
	if err := serveUntilDone(ctx, ln, px); err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	return nil
}
