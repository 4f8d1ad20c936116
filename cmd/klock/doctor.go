package main

import (
	"encoding/json"
	"fmt"

	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/spf13/cobra"
)

func newDoctor() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Probe this kernel's enforcement mechanisms for real and say what each guarantees",
		Long: `Doctor loads and attaches a trivial program (or builds a trivial ruleset) for
every mechanism klock can use, and reports what is available, what each
guarantees ("blocks before the effect" or "detects, kills and rolls back"),
why a mechanism is missing and how to enable it.

Exit status: 0 when strict mode can start here, 1 when it cannot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := detect.All()
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "kernel %s, running as %s\n\n", r.Kernel, map[bool]string{true: "root", false: "non-root"}[r.Root])
				for _, ch := range r.Checks {
					mark := "ok  "
					if !ch.OK {
						mark = "NO  "
					}
					fmt.Fprintf(w, "%s %-12s %s\n", mark, ch.Name, ch.Guarantee)
					if ch.Detail != "" {
						fmt.Fprintf(w, "     %s\n", ch.Detail)
					}
					if !ch.OK {
						fmt.Fprintf(w, "     why: %s\n     fix: %s\n", ch.Why, ch.Fix)
					} else if ch.Fix != "" {
						// Available, and a better setup is known (a kernel
						// that blocks what this one only detects).
						fmt.Fprintf(w, "     improve: %s\n", ch.Fix)
					}
				}
				if r.Strict {
					if r.FileWall == "bpf-lsm" {
						fmt.Fprintln(w, "\nstrict mode: ready (bpf-lsm decides every file, exec and raw-socket operation before its effect, cgroup-net walls the network; no syscall tracepoint needed)")
					} else {
						fmt.Fprintln(w, "\nstrict mode: ready (Landlock walls files, cgroup-net walls the network, tracepoints detect the rest)")
					}
				} else {
					fmt.Fprintf(w, "\nstrict mode: NOT ready (%s)\n", r.StrictWhy)
				}
			}
			if !r.Strict {
				return &exitError{code: exitInvalid, err: fmt.Errorf("strict mode cannot start here: %s", r.StrictWhy)}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}
