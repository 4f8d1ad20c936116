package plugin

import (
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// SessionManifest is the klock manifest one call of p runs under: strict
// mode, the system-ro baseline, its own directory readable, its entry (and
// interpreter) executable, and only what its permissions add (programs
// only by permissions.exec). workdir is
// klock's scratch directory for the plugin's sessions (their logs and
// backups), not a place the plugin may write.
func SessionManifest(p *Plugin, workdir string) (*policy.Manifest, []byte, error) {
	var in []string
	add := func(format string, a ...any) { in = append(in, fmt.Sprintf(format, a...)) }
	add("CONSUMES FILE:%s/**", p.Dir)
	add("PROVIDES PROC:%s", p.EntryPath)
	if p.Interpreter != "" {
		add("PROVIDES PROC:%s", p.Interpreter)
	}
	// Nothing else is executable unless permissions.exec names it: a shell
	// interpreter may run its own builtins, not start other programs.
	for _, prog := range p.Programs {
		add("PROVIDES PROC:%s", prog)
	}
	for _, r := range p.Permissions.Read {
		add("CONSUMES FILE:%s", r)
	}
	for _, w := range p.Permissions.Write {
		add("CONSUMES FILE:%s", w)
		add("MUTATES FILE:%s", w)
		add("PROVIDES FILE:%s", w)
	}
	for _, n := range p.Permissions.Network {
		add("CONSUMES NET:%s", n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: %q, version: %q}\nmode: strict\nworkdir: %q\nbaseline: system-ro\nintents:\n",
		"plugin-"+p.Name, p.Version, workdir)
	for _, s := range in {
		fmt.Fprintf(&b, "  - %q\n", s)
	}
	b.WriteString(`declared_tools: []
# The envelope is the gateway's business (the agent's manifest); this one only
# satisfies the schema.
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 1, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`)
	data := []byte(b.String())
	m, err := policy.Parse("plugin "+p.Name+" session", data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: its permissions do not make a valid scope: %v", ErrManifest, p.Dir, err)
	}
	return m, data, nil
}
