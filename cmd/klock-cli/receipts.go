package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/fleetbudget"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/guard/tokenguard"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newReceipts() *cobra.Command {
	c := &cobra.Command{
		Use:   "receipts",
		Short: "Work with signed receipts (klock receipts verify)",
		Args:  cobra.NoArgs,
	}
	o := &verifyOptions{}
	verify := &cobra.Command{
		Use:   "verify PATH...",
		Short: "Verify receipt chains offline: every signature and every link",
		Long: `Verify reads receipt chains (receipts.jsonl files, or receipts directories)
and checks, with nothing but the files: that each line is the canonical
(RFC 8785) JSON of a receipt, that its ed25519 signature verifies with the
chain's key (or with --key, to pin the key you trust), that seq counts
1, 2, 3, ... and that each prev is the SHA-256 of the line before. The first
line that fails is named with the reason.

It also checks Chio-format receipts (seed 003: id, timestamp, capability_id,
tool_server, tool_name, action, decision, content_hash, policy_hash,
evidence, metadata.financial, kernel_key, signature, optional prev_hash):
one receipt (as Chio writes it, pretty-printed or not), a JSON array, or one
per line. Each must be signed (ed25519 over its RFC 8785 canonical JSON
without the signature) by its kernel_key ("ed25519:pub:<hex>", or --key),
its parameter_hash must match its parameters, its financial record must be
consistent (known currency and settlement status, remaining within total, a
breakdown of amounts adding up to cost_charged, a usable oracle rate), and
each prev_hash must be the SHA-256 of the canonical receipt before it. The
format is recognized (klock lines carry seq and phase); --format picks it.

--fleet: the chains are a fleet's hosts' (one receipts directory per host
whose gateways share their grants through etcd, docs/gateway.md "Budgets
across hosts"). Besides verifying each, it adds up per grant their
invocations (invocation_delta) and charges (ledger_debit - ledger_credit)
and compares the sums with the fleet ledger in etcd: every host's usage as
it last recorded it, which is final once its gateways stopped or returned
an idle block. It prints one line per grant and fails on a grant whose sums
differ. etcd is the host's fleet (klockd's marker, $KLOCK_FLEET_MARKER),
or --etcd-endpoints and --etcd-prefix.

Exit status: 0 verified, 1 not verified (or not adding up), 2 usage.`,
		Example: `  klock receipts verify /srv/agent/.klock/receipts
  klock receipts verify --key /srv/agent/.klock/receipts/receipts.pub receipts.jsonl
  klock receipts verify --format chio receipt-with-financial.json
  klock receipts verify --fleet hostA/receipts hostB/receipts`,
		Args: cobra.MinimumNArgs(1),
		RunE: o.run,
	}
	verify.Flags().StringVar(&o.format, "format", "auto", "receipt format: auto, klock (a signed hash chain) or chio (seed 003's receipts)")
	verify.Flags().StringVar(&o.keyFile, "key", "", "trusted public key (PEM or ed25519:<base64>); default: each chain's own key")
	verify.Flags().BoolVar(&o.fleet, "fleet", false, "the chains are a fleet's hosts': check that they add up to the fleet's budget ledger in etcd")
	verify.Flags().StringVar(&o.endpoints, "etcd-endpoints", "", "--fleet: the fleet's etcd (URL,...) instead of this host's fleet marker")
	verify.Flags().StringVar(&o.prefix, "etcd-prefix", "", "--fleet with --etcd-endpoints: the fleet's key prefix (default /klock)")
	c.AddCommand(verify)
	return c
}

// isChio decides the format of the receipts at path (--format).
func isChio(path, format string) (bool, error) {
	switch format {
	case "klock":
		return false, nil
	case "chio":
		return true, nil
	case "auto", "":
		data, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		return receipt.LooksChio(data), nil
	}
	return false, fmt.Errorf("--format %q: want auto, klock or chio", format)
}

func verifyChio(cmd *cobra.Command, path string, trusted ed25519.PublicKey) error {
	f, err := os.Open(path)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	defer f.Close()
	s, err := receipt.VerifyChio(f, trusted)
	if err != nil {
		return &exitError{code: exitInvalid, err: fmt.Errorf("%s: %w", path, err)}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "verified %s: %d Chio-format receipt(s), signed by %s\n", path, s.Receipts, s.KernelKey)
	return nil
}

func chainPath(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return filepath.Join(p, "receipts.jsonl")
	}
	return p
}

func newReport() *cobra.Command {
	var minRuns, share int
	var asJSON bool
	c := &cobra.Command{
		Use:   "report [PATH...]",
		Short: "Flag agents whose measured costs keep exceeding their cost envelope",
		Long: `Report verifies receipt chains (receipts.jsonl files or receipts
directories; default .klock/receipts) and, per agent, counts the model calls
whose measured actual (api-usage, harness-reported or manual-meter)
exceeded the cost envelope the call was held to. An agent is flagged for
capability-maintainer review when at least --share percent of at least
--min-runs measured calls exceeded it. Calls without a measured actual are
counted apart, never as evidence.

Grants delegated from others (cost_envelope.parent_grant) are shown as a
tree: each parent grant with what it was charged in all (its own calls and
its children's, as its ledger counts them) and each child with its own.

Exit status: 0 report printed (flagged or not), 1 a chain did not verify.`,
		Example: `  klock report /srv/agent/.klock/receipts
  klock report --min-runs 10 --share 30 --json a/receipts b/receipts`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{filepath.Join(".klock", "receipts")}
			}
			rep := tokenguard.NewReporter(tokenguard.WithMinRuns(minRuns), tokenguard.WithShare(share*100))
			var del budget.Delegations
			each := func(r *receipt.Receipt) error {
				if err := del.Add(r); err != nil {
					return err
				}
				return rep.Add(r)
			}
			for _, a := range args {
				if _, err := receipt.VerifyFile(chainPath(a), nil, each); err != nil {
					return &exitError{code: exitInvalid, err: fmt.Errorf("%s: %w", chainPath(a), err)}
				}
			}
			agents := rep.Agents()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(agents)
			}
			if len(agents) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no metered calls in these receipts")
			}
			for _, a := range agents {
				mark := "ok     "
				if a.Flagged {
					mark = "FLAGGED"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s", mark, a)
				if len(a.Limits) > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "; limits exceeded: %v", a.Limits)
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			printDelegations(cmd, del.Trees())
			return nil
		},
	}
	c.Flags().IntVar(&minRuns, "min-runs", 3, "measured calls an agent needs before it can be flagged")
	c.Flags().IntVar(&share, "share", 50, "percent of measured calls that must exceed the envelope to flag")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}

type verifyOptions struct {
	keyFile, format   string
	fleet             bool
	endpoints, prefix string
}

func (o *verifyOptions) run(cmd *cobra.Command, args []string) error {
	var trusted ed25519.PublicKey
	if o.keyFile != "" {
		data, err := os.ReadFile(o.keyFile)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if trusted, err = policy.ParsePublicKey(data); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
	}
	tally := fleetbudget.Tally{}
	for _, a := range args {
		path := chainPath(a)
		chio, err := isChio(path, o.format)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if chio {
			if o.fleet {
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: --fleet adds up klock receipt chains, not Chio-format receipts", path)}
			}
			if err := verifyChio(cmd, path, trusted); err != nil {
				return err
			}
			continue
		}
		if err := verifyChain(cmd, path, trusted, tally); err != nil {
			return err
		}
	}
	if o.fleet || o.endpoints != "" {
		return o.compareFleet(cmd, tally)
	}
	return nil
}

func verifyChain(cmd *cobra.Command, path string, trusted ed25519.PublicKey, tally fleetbudget.Tally) error {
	var allow, deny int
	s, err := receipt.VerifyFile(path, trusted, func(r *receipt.Receipt) error {
		if r.Decision.Verdict == receipt.Allow {
			allow++
		} else {
			deny++
		}
		tally.Add(r)
		return nil
	})
	if err != nil {
		return &exitError{code: exitInvalid, err: fmt.Errorf("%s: %w", path, err)}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "verified %s: %d receipts (%d allow, %d deny/other), signed by %s, head seq %d sha256 %s\n",
		path, s.Receipts, allow, deny, s.KernelKey, s.Head.Seq, s.Head.Hash)
	return nil
}

// compareFleet reads the fleet's budget ledger and compares it with the
// chains' sums.
func (o *verifyOptions) compareFleet(cmd *cobra.Command, tally fleetbudget.Tally) error {
	cfg := fleet.Config{Endpoints: fleet.Endpoints(o.endpoints), Prefix: o.prefix}
	if o.endpoints == "" {
		var err error
		if cfg, err = fleet.ReadMarker(); err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--fleet: %w; or name the fleet's etcd with --etcd-endpoints", err)}
		}
	}
	cli, cfg, err := fleet.Dial(cfg)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	fl, err := fleetbudget.ReadLedger(ctx, cli, cfg.Prefix)
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	lines, err := fleetbudget.Compare(tally, fl)
	for _, l := range lines {
		fmt.Fprintln(cmd.OutOrStdout(), l)
	}
	if err != nil {
		return &exitError{code: exitInvalid, err: err}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "the chains add up to the fleet ledger (etcd %s prefix %s): %d grant(s)\n", strings.Join(cfg.Endpoints, ","), cfg.Prefix, len(fl))
	return nil
}

// printDelegations prints each delegation tree: a parent grant with its
// total (own and delegated spend) and its children, indented.
func printDelegations(cmd *cobra.Command, roots []*budget.Node) {
	var walk func(n *budget.Node, depth int)
	walk = func(n *budget.Node, depth int) {
		lead := "delegation "
		if depth > 0 {
			lead = strings.Repeat("  ", depth) + "└ "
		}
		name := n.Key.String()
		if n.Tool != "" {
			name += " (" + n.Tool + ")"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s%s: %s charged", lead, name, n.Amount(n.Total()))
		if len(n.Children) > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), " (own calls %s)", n.Amount(n.Own))
		}
		fmt.Fprintf(cmd.OutOrStdout(), ", %d invocation(s) of its own\n", n.Invocations)
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
}
