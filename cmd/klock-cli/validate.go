package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/guard/plugin"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

func newValidate() *cobra.Command {
	var asJSON, quiet bool
	c := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check manifests against the rules; report every problem with its location",
		Long: `Validate decodes each manifest strictly (unknown fields are errors, with a
suggestion) and checks the rules of the seeds: exhaustive tools (no "any"),
enums, the lethal trifecta (forces HITL), organizational blast radius
(HOTL needs maintainer approval), the cost envelope (max > expected,
context_efficiency >= 0.3, integer money), REVERSIBLE-WRITE needs a named
rollback, and path patterns the kernel can enforce exactly.

Every error reads FILE:LINE:COLUMN: FIELD: what is wrong; what would be right.
A FILE named plugin.json is a tool plugin's manifest (seed 004 §8): its
entry, capabilities and permissions are checked as klock tools serve loads
them (an exec permission naming a shell is refused: plugin-shell).

Exit status: 0 all valid (warnings allowed), 1 any invalid, 2 usage.`,
		Example: `  klock validate examples/manifests/*.yaml
  klock validate --json agent.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			type result struct {
				File        string              `json:"file"`
				Valid       bool                `json:"valid"`
				Errors      []policy.Diagnostic `json:"errors,omitempty"`
				Warnings    []policy.Diagnostic `json:"warnings,omitempty"`
				ReadFailure string              `json:"read_error,omitempty"`
			}
			var results []result
			bad := 0
			for _, f := range args {
				if filepath.Base(f) == plugin.ManifestFile {
					// A plugin's manifest: seed 004 §8's rules (no shell in exec).
					d := validatePlugin(f)
					if d != nil {
						bad++
						fmt.Fprintln(os.Stderr, *d)
					} else if !quiet && !asJSON {
						fmt.Fprintf(cmd.OutOrStdout(), "ok  %s (plugin)\n", f)
					}
					results = append(results, result{File: f, Valid: d == nil, Errors: diagList(d)})
					continue
				}
				m, err := policy.Load(f)
				r := result{File: f, Valid: err == nil}
				var ve *policy.ValidationError
				switch {
				case err == nil:
					r.Warnings = m.Warnings
				case errors.As(err, &ve):
					r.Errors = ve.Diags
				default:
					r.ReadFailure = err.Error()
				}
				if !r.Valid {
					bad++
				}
				results = append(results, r)
				if asJSON {
					continue
				}
				for _, d := range r.Errors {
					fmt.Fprintln(os.Stderr, d)
				}
				if r.ReadFailure != "" {
					fmt.Fprintf(os.Stderr, "%s: %s\n", f, r.ReadFailure)
				}
				for _, d := range r.Warnings {
					fmt.Fprintln(os.Stderr, d)
				}
				if r.Valid && !quiet {
					fmt.Fprintf(cmd.OutOrStdout(), "ok  %s (agent %s, %d intents, %d tools)\n", f, m.Agent.ID, len(m.Intents), len(m.DeclaredTools))
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			}
			if bad > 0 {
				return &exitError{code: exitInvalid, err: fmt.Errorf("%d of %d manifest(s) invalid", bad, len(args))}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print results as JSON on stdout")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing for valid manifests")
	return c
}

// validatePlugin loads the plugin whose plugin.json is f; nil when valid.
func validatePlugin(f string) *policy.Diagnostic {
	_, err := plugin.Load(filepath.Dir(f))
	if err == nil {
		return nil
	}
	code := "plugin"
	if errors.Is(err, plugin.ErrShell) {
		code = "plugin-shell"
	}
	return &policy.Diagnostic{Severity: policy.SeverityError, Code: code, Pos: policy.Pos{File: f}, Problem: err.Error()}
}

func diagList(d *policy.Diagnostic) []policy.Diagnostic {
	if d == nil {
		return nil
	}
	return []policy.Diagnostic{*d}
}
