package main

import (
	"fmt"
	"runtime"

	"github.com/klocklabs/klock/internal/version"
	"github.com/spf13/cobra"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print klock's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "klock %s %s/%s %s\n", version.String(), runtime.GOOS, runtime.GOARCH, runtime.Version())
		},
	}
}
