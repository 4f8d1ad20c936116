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
	var keyFile, format string
	verify := &cobra.Command{
		Use:   "verify PATH",
		Short: "Verify a receipt chain offline: every signature and every link",
		Long: `Verify reads a receipt chain (a receipts.jsonl, or a receipts directory)
and checks, with nothing but the file: that each line is the canonical
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

Exit status: 0 verified, 1 not verified, 2 usage.`,
		Example: `  klock receipts verify /srv/agent/.klock/receipts
  klock receipts verify --key /srv/agent/.klock/receipts/receipts.pub receipts.jsonl
  klock receipts verify --format chio receipt-with-financial.json`,
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
			chio, err := isChio(path, format)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if chio {
				return verifyChio(cmd, path, trusted)
			}
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
	verify.Flags().StringVar(&format, "format", "auto", "receipt format: auto, klock (a signed hash chain) or chio (seed 003's receipts)")
	verify.Flags().StringVar(&keyFile, "key", "", "trusted public key (PEM or ed25519:<base64>); default: the chain's own key")
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
