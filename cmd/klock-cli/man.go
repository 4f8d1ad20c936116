package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenMan writes klock's man pages (section 1, one per command) from
// the command tree, for make install and the Debian package: hidden, as
// it is the build's tool rather than the user's.
func newGenMan() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write klock's man pages (klock.1, klock-run.1, ...) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // reproducible pages: no date
			h := &doc.GenManHeader{Title: "KLOCK", Section: "1", Source: "klock", Manual: "klock manual"}
			if err := doc.GenManTree(root, h, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	}
}
