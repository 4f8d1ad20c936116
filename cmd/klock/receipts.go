package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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
	var keyFile string
	verify := &cobra.Command{
		Use:   "verify PATH",
		Short: "Verify a receipt chain offline: every signature and every link",
		Long: `Verify reads a receipt chain (a receipts.jsonl, or a receipts directory)
and checks, with nothing but the file: that each line is the canonical
(RFC 8785) JSON of a receipt, that its ed25519 signature verifies with the
chain's key (or with --key, to pin the key you trust), that seq counts
1, 2, 3, ... and that each prev is the SHA-256 of the line before. The first
line that fails is named with the reason.

Exit status: 0 verified, 1 not verified, 2 usage.`,
		Example: `  klock receipts verify /srv/agent/.klock/receipts
  klock receipts verify --key /srv/agent/.klock/receipts/receipts.pub receipts.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var trusted ed25519.PublicKey
			if keyFile != "" {
				data, err := os.ReadFile(keyFile)
				if err != nil {
					return &exitError{code: exitUsage, err: err}
				}
				if trusted, err = policy.ParsePublicKey(data); err != nil {
					return &exitError{code: exitUsage, err: err}
				}
			}
			path := chainPath(args[0])
			var allow, deny int
			s, err := receipt.VerifyFile(path, trusted, func(r *receipt.Receipt) error {
				if r.Decision.Verdict == receipt.Allow {
					allow++
				} else {
					deny++
				}
				return nil
			})
			if err != nil {
				return &exitError{code: exitInvalid, err: fmt.Errorf("%s: %w", path, err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verified %s: %d receipts (%d allow, %d deny/other), signed by %s, head seq %d sha256 %s\n",
				path, s.Receipts, allow, deny, s.KernelKey, s.Head.Seq, s.Head.Hash)
			return nil
		},
	}
	verify.Flags().StringVar(&keyFile, "key", "", "trusted public key (PEM or ed25519:<base64>); default: the chain's own key")
	c.AddCommand(verify)
	return c
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

Exit status: 0 report printed (flagged or not), 1 a chain did not verify.`,
		Example: `  klock report /srv/agent/.klock/receipts
  klock report --min-runs 10 --share 30 --json a/receipts b/receipts`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{filepath.Join(".klock", "receipts")}
			}
			rep := tokenguard.NewReporter(tokenguard.WithMinRuns(minRuns), tokenguard.WithShare(share*100))
			for _, a := range args {
				if _, err := receipt.VerifyFile(chainPath(a), nil, rep.Add); err != nil {
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
			return nil
		},
	}
	c.Flags().IntVar(&minRuns, "min-runs", 3, "measured calls an agent needs before it can be flagged")
	c.Flags().IntVar(&share, "share", 50, "percent of measured calls that must exceed the envelope to flag")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}
