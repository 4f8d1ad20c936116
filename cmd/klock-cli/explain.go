package main

import (
	"github.com/klocklabs/klock/enforcer/dnsproxy"
	"github.com/klocklabs/klock/internal/explain"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newExplain() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "explain FILE",
		Short: "Show what a manifest allows: the permissions matrix, intents, trifecta and HITL verdict",
		Long: `Explain prints the permissions matrix of seed 002 (tool, side effect,
idempotent, rollback, unsupervised autonomy, approval needed), the
intents, the lethal-trifecta verdict and the human-oversight mode that
will actually apply, the cost envelope and the grants. On a host with
Landlock it also plans the file wall against the file system as it is now
and lists the declared rules the wall cannot put exactly where they are
declared (a path that does not exist yet, a directory the agent may
replace): those are enforced by detection (detects, kills and rolls
back) instead of being refused before the effect.`,
		Example: `  klock explain examples/manifests/refund-agent.yaml
  klock explain --json agent.yaml | jq .permissions_matrix`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := policy.Load(args[0])
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			rs, err := policy.Compile(m)
			if err != nil {
				return &exitError{code: exitInvalid, err: err}
			}
			r := explain.Build(m, rs)
			r.Wall = explainWall(rs)
			r.DNSPrivate = explainDNS(rs)
			if asJSON {
				return explain.JSON(cmd.OutOrStdout(), r)
			}
			return explain.Text(cmd.OutOrStdout(), r)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}

// explainDNS says which declared names may resolve to non-public
// addresses: only to those the manifest declares (nil when none).
func explainDNS(rs *policy.Ruleset) *explain.DNSPrivate {
	d := &explain.DNSPrivate{}
	for _, p := range rs.DeclaredPrefixes() {
		if !dnsproxy.NonPublic(p) {
			continue
		}
		if p.IsSingleIP() {
			d.Prefixes = append(d.Prefixes, p.Addr().String())
		} else {
			d.Prefixes = append(d.Prefixes, p.String())
		}
	}
	seen := map[string]bool{}
	for _, r := range rs.Net {
		if h := r.Pattern.Host; h != "" && !seen[h] && r.Access.Has(policy.Consumes) && rs.Intents[r.Intent].Origin == "manifest" {
			seen[h] = true
			d.Names = append(d.Names, h)
		}
	}
	if len(d.Prefixes) == 0 || len(d.Names) == 0 {
		return nil
	}
	return d
}
