package main

import (
	"fmt"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newSchema() *cobra.Command {
	c := &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the manifest (for editors)",
		Long: `Schema prints the JSON Schema (draft 2020-12) of the klock/v1 manifest.
Point your editor's YAML language server at it for completion and checks;
klock validate still enforces the cross-field rules the schema cannot say.

A tool's file path argument is {type: path, within: [DIR, ...]}: the gateway
checks it where the tool will take it (cleaned, symlinks resolved), which a
string pattern such as ^/srv/data/ cannot (/srv/data/../etc matches it).`,
		Example: `  klock schema > klock-manifest.schema.json
  # in agent.yaml:  # yaml-language-server: $schema=./klock-manifest.schema.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := policy.JSONSchema()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return err
		},
	}
	c.AddCommand(&cobra.Command{
		Use:   "events",
		Short: "Print the JSON Schema of an event record (klock events, --events-file)",
		Long: `schema events prints the JSON Schema (draft 2020-12) of one record of
klock events -o json and of the files klockd --events-file and klock run
--events-file write. Its version is the record's "v"; a new kind or
optional field keeps it, a removed or changed field makes a new one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(eventlog.Schema())
			return err
		},
	})
	return c
}
