package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/klocklabs/klock/policy"
)

// Report is the machine-readable form of klock explain --json.
type Report struct {
	File     string          `json:"file"`
	Agent    policy.Agent    `json:"agent"`
	Mode     policy.Mode     `json:"mode"`
	Workdir  string          `json:"workdir,omitempty"`
	Baseline policy.Baseline `json:"baseline"`
	// Tmp says whose /tmp the agent sees (policy.Manifest.TmpNote).
	Tmp        string               `json:"tmp"`
	Intents    []string             `json:"intents"`
	BaselineN  int                  `json:"baseline_intents"`
	Matrix     []policy.MatrixRow   `json:"permissions_matrix"`
	Trifecta   policy.Trifecta      `json:"trifecta"`
	HITL       policy.HITLMode      `json:"hitl_mode"`
	HITLReason string               `json:"hitl_reason"`
	Cost       *policy.CostEnvelope `json:"cost_envelope"`
	Grants     []policy.Grant       `json:"grants,omitempty"`
	Warnings   []policy.Diagnostic  `json:"warnings,omitempty"`
	// Network says what declared network objects give the agent where
	// that is less than their name suggests (NET:raw).
	Network []string `json:"network_notes,omitempty"`
	Signed  bool     `json:"signed"`
	// Wall is how the Landlock wall of this host would enforce the file
	// rules, when the caller planned it (nil otherwise).
	Wall *Wall `json:"landlock_wall,omitempty"`
	// DNSPrivate says which declared names the session's DNS proxy lets
	// resolve to non-public addresses: those of the manifest's address
	// intents (nil when it declares no such address or no name).
	DNSPrivate *DNSPrivate `json:"dns_private,omitempty"`
}

// DNSPrivate: an answer for one of Names may hold an address in one of
// Prefixes (loopback, private, link-local, ...) because the manifest
// declares it; any other non-public answer is withheld from the agent.
type DNSPrivate struct {
	Names    []string `json:"names"`
	Prefixes []string `json:"prefixes"`
}

// Wall is what the Landlock wall, planned against the file system as it is
// now, does with the declared file rules: those it cannot put exactly
// where they are declared go wider, and the observer decides each
// operation there (detects, kills and rolls back) instead of the kernel
// refusing it before the effect.
type Wall struct {
	ABI int `json:"abi"`
	// Detected are the declared objects enforced by detection, with where
	// the wall was put instead and why.
	Detected []WallNote `json:"detected"`
	// Refused are declared objects the wall grants nothing for.
	Refused []WallNote `json:"refused,omitempty"`
}

// WallNote is one declared object the wall differs on.
type WallNote struct {
	Object string `json:"object"`
	Wall   string `json:"wall,omitempty"`
	Reason string `json:"reason"`
}

// Build assembles the report.
func Build(m *policy.Manifest, rs *policy.Ruleset) Report {
	r := Report{
		File: m.File, Agent: m.Agent, Mode: m.Mode, Workdir: m.Workdir, Baseline: m.Baseline,
		Matrix: m.PermissionsMatrix(), Trifecta: m.Trifecta(), Cost: m.CostEnvelope,
		Grants: m.Grants, Warnings: m.Warnings, Signed: m.Signature != nil, Tmp: m.TmpNote(),
	}
	r.HITL, r.HITLReason = m.EffectiveHITL()
	if rs.RawSockets {
		// The agent runs without capabilities: what NET:raw can give it
		// is the ping sockets klock opens to its group, not SOCK_RAW.
		r.Network = append(r.Network,
			"NET:raw: ping works (ICMP echo through ping sockets, which klock lets the agent's group open in the session's network namespace), to the declared peers' addresses only",
			"NET:raw: a raw (SOCK_RAW) or packet socket still fails with EPERM: the agent runs without CAP_NET_RAW, which no intent gives it")
	}
	for _, in := range rs.Intents {
		if in.Origin == "manifest" {
			r.Intents = append(r.Intents, in.String())
		} else {
			r.BaselineN++
		}
	}
	return r
}

// JSON writes the report as indented JSON.
func JSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Text writes the report for people.
func Text(w io.Writer, r Report) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("Agent %s", r.Agent.ID)
	if r.Agent.Version != "" {
		p(" v%s", r.Agent.Version)
	}
	if r.Agent.Owner.Team != "" {
		p(" (owner: %s)", r.Agent.Owner.Team)
	}
	p("\nMode: %s   Baseline: %s   Workdir: %s   Signed: %v\n", r.Mode, r.Baseline, orDash(r.Workdir), r.Signed)
	if r.Tmp != "" {
		p("Tmp: %s\n", r.Tmp)
	}

	if len(r.Matrix) > 0 {
		p("\nPermissions matrix (%d tools)\n", len(r.Matrix))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tSIDE EFFECT\tIDEMPOTENT\tROLLBACK\tUNSUPERVISED AUTONOMY\tAPPROVAL NEEDED\tBLAST RADIUS")
		for _, row := range r.Matrix {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.Tool, row.SideEffectLabel(), row.Idempotent, row.Rollback, row.Unsupervised, row.ApprovalNeeded, row.BlastRadius)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, row := range r.Matrix {
			if row.UnsupervisedCEL != "" && row.UnsupervisedCEL != row.Unsupervised {
				p("  %s: unsupervised_if %q is seed 002's syntax; it runs as the CEL %s\n", row.Tool, row.Unsupervised, row.UnsupervisedCEL)
			}
			contractNotes(p, row, r.Grants)
		}
	} else {
		p("\nNo declared tools: the tool gateway lets nothing through.\n")
	}

	p("\nLethal trifecta: ")
	if r.Trifecta.Present {
		p("YES: %s (untrusted content) + %s (private data) + %s (external communication)\n", r.Trifecta.Untrusted, r.Trifecta.Private, r.Trifecta.External)
	} else {
		var have []string
		for _, x := range []struct{ tool, what string }{{r.Trifecta.Untrusted, "untrusted content"}, {r.Trifecta.Private, "private data"}, {r.Trifecta.External, "external communication"}} {
			if x.tool != "" {
				have = append(have, x.what+" via "+x.tool)
			}
		}
		if len(have) == 0 {
			p("no\n")
		} else {
			p("no (has %s)\n", strings.Join(have, ", "))
		}
	}
	p("Human oversight: %s (%s)\n", r.HITL, r.HITLReason)

	p("\nIntents (%d declared, %d from baseline %s)\n", len(r.Intents), r.BaselineN, r.Baseline)
	for _, in := range r.Intents {
		p("  %s\n", in)
	}
	if c := r.Cost; c != nil {
		p("\nCost envelope\n")
		p("  tokens in   %d expected, %d max\n", c.ExpectedTokensIn, c.MaxTokensIn)
		p("  tokens out  %d expected, %d max\n", c.ExpectedTokensOut, c.MaxTokensOut)
		p("  latency     %d ms expected, %d ms max\n", c.ExpectedLatencyMS, c.MaxLatencyMS)
		if c.ExpectedCost != nil && c.MaxCost != nil {
			p("  cost        %s expected, %s max\n", c.ExpectedCost.Amount, c.MaxCost.Amount)
		}
		p("  context efficiency %.2f\n", c.ContextEfficiency)
	}
	if len(r.Grants) > 0 {
		p("\nGrants\n")
		for _, g := range r.Grants {
			p("  %s\n", g)
		}
	}
	if r.Wall != nil {
		p("\nOn this host's Landlock wall (ABI %d; bpf-lsm, where the kernel has it, decides every rule before the effect)\n", r.Wall.ABI)
		if len(r.Wall.Detected) == 0 && len(r.Wall.Refused) == 0 {
			p("  every declared file rule is walled exactly: blocks before the effect\n")
		}
		for _, n := range r.Wall.Detected {
			p("  detects, kills and rolls back  %s  (walled at %s)\n", n.Object, n.Wall)
		}
		for _, n := range r.Wall.Refused {
			p("  refused by the wall            %s  %s\n", n.Object, n.Reason)
		}
	}
	if len(r.Network) > 0 {
		p("\nNetwork\n")
		for _, n := range r.Network {
			p("  %s\n", n)
		}
	}
	if d := r.DNSPrivate; d != nil {
		p("\nDNS: %s may resolve to the declared %s; any other loopback, private, link-local or metadata answer is withheld\n",
			strings.Join(d.Names, ", "), strings.Join(d.Prefixes, ", "))
	}
	if len(r.Warnings) > 0 {
		p("\nWarnings\n")
		for _, d := range r.Warnings {
			p("  %s\n", d)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// contractNotes says what the gateway does with a tool's permission and
// its declared cost_per_invocation.
func contractNotes(p func(string, ...any), row policy.MatrixRow, grants []policy.Grant) {
	if pm := row.Permission; pm != nil {
		var parts []string
		if pm.ActsAs != "" {
			parts = append(parts, fmt.Sprintf("acts as %q (sent with every call)", pm.ActsAs))
		}
		if len(pm.Scope) > 0 {
			parts = append(parts, "scope "+strings.Join(pm.Scope, ", "))
		}
		if len(pm.Forbidden) > 0 {
			parts = append(parts, "forbidden "+strings.Join(pm.Forbidden, ", "))
		}
		p("  %s: %s\n", row.Tool, strings.Join(parts, "; "))
	}
	if row.CostPerInvocation == "" {
		return
	}
	granted := false
	for _, g := range grants {
		granted = granted || g.Tool == row.Tool
	}
	switch {
	case strings.HasSuffix(row.CostPerInvocation, " tokens"):
		p("  %s: cost_per_invocation %s (tokens: declared, not charged to a money budget)\n", row.Tool, row.CostPerInvocation)
	case granted:
		p("  %s: cost_per_invocation %s charged per call on top of the reported cost, to its grant\n", row.Tool, row.CostPerInvocation)
	default:
		p("  %s: cost_per_invocation %s declared, not charged: no grant names %s\n", row.Tool, row.CostPerInvocation, row.Tool)
	}
}
