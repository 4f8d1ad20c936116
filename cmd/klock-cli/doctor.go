package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/enforcer/svccheck"
	"github.com/spf13/cobra"
)

// doctorReport is doctor --json: the kernel's report, and klockd's state
// under "klockd".
type doctorReport struct {
	detect.Report
	Klockd svccheck.Status `json:"klockd"`
}

// printService prints klockd's state as a service.
func printService(w io.Writer, st svccheck.Status) {
	yes := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintln(w, "\nklockd (the daemon; klock run works without it):")
	fmt.Fprintf(w, "  installed  %s", yes[st.Installed])
	if st.Installed {
		fmt.Fprintf(w, " (%s, %s)", st.Binary, st.UnitFiles["klockd.service"])
	}
	fmt.Fprintln(w)
	if st.Systemd {
		fmt.Fprintf(w, "  enabled    klockd.socket %s, klockd.service %s\n", st.Enabled["klockd.socket"], st.Enabled["klockd.service"])
	} else {
		fmt.Fprintln(w, "  enabled    - (systemd is not running)")
	}
	fmt.Fprintf(w, "  reachable  %s (%s", yes[st.Reachable], st.Socket)
	if st.Reachable {
		fmt.Fprintf(w, ", %d sessions", st.Sessions)
	}
	fmt.Fprintln(w, ")")
	for _, why := range st.Why {
		fmt.Fprintf(w, "     why: %s\n", why)
	}
	if f := st.Fleet; f != nil {
		fmt.Fprintf(w, "  fleet      %s: reachable %s", f.Config, yes[f.Reachable])
		if f.Reachable {
			fmt.Fprintf(w, " (%d leases, every host's)", f.Leases)
		}
		fmt.Fprintln(w)
		if f.Why != "" {
			fmt.Fprintf(w, "     why: %s\n", f.Why)
		}
	}
}

func newDoctor() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Probe this kernel's enforcement mechanisms for real and say what each guarantees",
		Long: `Doctor loads and attaches a trivial program (or builds a trivial ruleset) for
every mechanism klock can use, and reports what is available, what each
guarantees ("blocks before the effect" or "detects, kills and rolls back"),
why a mechanism is missing and how to enable it.

It then says whether klockd, klock's daemon, is installed (its systemd
units and binary), enabled (as systemctl says, when systemd runs) and
reachable (its socket answers a ps request), and, on a host whose klockd
shares its leases with a fleet, whether the fleet's etcd answers now.

Exit status: 0 when strict mode can start here, 1 when it cannot (klockd's
state does not change it: klock run works without klockd).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := detect.All()
			svc := svccheck.Check(cmd.Context(), "")
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(doctorReport{r, svc}); err != nil {
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
				printService(w, svc)
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
