package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// readTools declares each tool a category B READ tool.
func readTools(tools ...string) string {
	var decl strings.Builder
	for _, name := range tools {
		fmt.Fprintf(&decl, "  - {name: %s, type: read, blast_radius: read, category: B, side_effects: READ, timeout_ms: 30000}\n", name)
	}
	return decl.String()
}

// serve starts `klock tools serve` with the plugins in dir for a manifest
// declaring decl (YAML list items), with extra flags, and returns its URL
// and a function that stops it.
func serve(t *testing.T, base, plugins, decl string, extra ...string) (string, func()) {
	t.Helper()
	manifest := filepath.Join(base, "agent.yaml")
	// A restart serves the same agent: the manifest is written once.
	if _, err := os.Stat(manifest); err != nil {
		write(t, manifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: exec-agent-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
%scost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`, time.Now().UnixNano(), base, decl), 0o644)
	}
	state := filepath.Join(base, "state")
	// srv runs in base, where a relative flag (--state-dir state) resolves.
	url, stop, _ := startServe(t, base, nil, append([]string{"-m", manifest, "--plugins", plugins,
		"--state-dir", state, "--control", filepath.Join(state, "control.sock")}, extra...)...)
	return url, stop
}

// A plugin executes only its entry and its interpreter. A
// #!/bin/sh entry that runs `sh -c id` is stopped (its shell may not start
// another program), as is one that runs a program directly; a plugin whose
// permissions list a program may run exactly that one.
func TestPluginExecutesOnlyItsEntryAndInterpreter(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	plugins := filepath.Join(base, "plugins")
	plugin(t, plugins, "shellout", `{"network":false,"filesystem":false}`,
		`read -r line
who=$(sh -c id)
printf '{"output":"%s"}\n' "$who"
`)
	plugin(t, plugins, "direct", `{"network":false,"filesystem":false}`,
		`read -r line
who=$(/usr/bin/id -u)
printf '{"output":"%s"}\n' "$who"
`)
	plugin(t, plugins, "declared", `{"network":false,"filesystem":false,"exec":["/usr/bin/id"]}`,
		`read -r line
who=$(/usr/bin/id -u)
printf '{"output":"%s"}\n' "$who"
`)
	// Builtins are the interpreter's own: no exec, no violation.
	plugin(t, plugins, "builtin", `{"network":false,"filesystem":false}`,
		`read -r line
printf '{"output":"%s"}\n' "$(echo hi)"
`)
	url, _ := serve(t, base, plugins, readTools("shellout", "direct", "declared", "builtin"))
	for _, tool := range []string{"shellout", "direct"} {
		r := post(t, url, fmt.Sprintf(`{"tool":%q,"args":{}}`, tool))
		if r.OK || r.Class != "tool_sandbox_violation" {
			t.Errorf("%s ran another program: %+v", tool, r)
		}
	}
	if r := post(t, url, `{"tool":"declared","args":{}}`); !r.OK || string(r.Output) != `"65534"` {
		t.Errorf("declared program: %+v", r)
	}
	if r := post(t, url, `{"tool":"builtin","args":{}}`); !r.OK || string(r.Output) != `"hi"` {
		t.Errorf("builtins: %+v", r)
	}
}

// A relative --state-dir is resolved once, at start: the plugin sessions,
// which run in their own directories, find their workdirs under it.
func TestRelativeStateDir(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	plugins := filepath.Join(base, "plugins")
	plugin(t, plugins, "hello", `{"network":false,"filesystem":false}`, `read -r line
printf '{"output":"hi"}\n'
`)
	url, _ := serve(t, base, plugins, readTools("hello"), "--state-dir", "rel-state")
	if r := post(t, url, `{"tool":"hello","args":{}}`); !r.OK || string(r.Output) != `"hi"` {
		t.Fatalf("a plugin call with --state-dir rel-state: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(base, "rel-state", "gateway")); err != nil {
		t.Fatalf("the state is not under the directory klock tools serve started in: %v", err)
	}
}
