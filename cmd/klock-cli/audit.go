package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/guard/audit"
	"github.com/spf13/cobra"
)

func newAudit() *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Work with a tool gateway's audit log (klock audit verify)",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(&cobra.Command{
		Use:   "verify PATH",
		Short: "Verify an audit log's hash chain offline",
		Long: `Verify reads a gateway's audit log (an audit.jsonl, or the directory holding
one, e.g. <state-dir>/gateway/<agent>) and checks its hash chain: seq counts
1, 2, 3, ... and each record's prev is the SHA-256 of the line before, so a
record changed, removed or inserted after it was written is found. The
first line that fails is named with the reason.

Exit status: 0 verified, 1 not verified, 2 usage.`,
		Example: `  klock audit verify /var/lib/klock/gateway/refund-agent-01/audit.jsonl
  klock audit verify /var/lib/klock/gateway/refund-agent-01`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if st, err := os.Stat(path); err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("%w (give the audit.jsonl a gateway wrote, or its directory)", err)}
			} else if st.IsDir() {
				path = filepath.Join(path, "audit.jsonl")
			}
			n, err := audit.Verify(path)
			if err != nil {
				return &exitError{code: exitInvalid, err: fmt.Errorf("%s: %w (the log was altered: keep it as evidence)", path, err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d records, chain intact\n", path, n)
			return nil
		},
	})
	return c
}
