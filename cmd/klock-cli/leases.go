package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/leaseapi"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/spf13/cobra"
)

// leasesError maps a lease API failure to klock's exit statuses: 1 for
// nothing to revoke, 3 when klockd is not running or refused.
func leasesError(err error) error {
	code := exitNoDaemon
	if errors.Is(err, leaseapi.ErrNotFound) {
		code = exitInvalid
	}
	return &exitError{code: code, err: err}
}

// hostLeaseViews lists the host's lease store directly (klockd is not
// running: the embedded sessions' leases are there).
func hostLeaseViews() ([]leaseapi.Lease, error) {
	st, err := session.HostLeases()
	if err != nil {
		return nil, err
	}
	ls, err := st.List(context.Background(), lease.Filter{})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]leaseapi.Lease, 0, len(ls))
	for i := range ls {
		out = append(out, leaseapi.View(&ls[i], now))
	}
	return out, nil
}

// leasesOptions are klock leases's flags; run is the command.
type leasesOptions struct {
	asJSON bool
	socket string
}

func newLeases() *cobra.Command {
	o := &leasesOptions{}
	c := &cobra.Command{
		Use:   "leases",
		Short: "List the KLIS leases held on this host (and revoke them)",
		Long: `leases lists the leases held on this host (one store every klock
process shares: embedded klock runs, klockd's sessions and its lease API,
the tool gateways): one per intent a session, a tool call or an
orchestrator acquired. A lease is a
KLIS predicate on a resource (FILE pattern or NET endpoint; running a
program is not leased), held by an agent's session until it is released,
revoked, or not heartbeated for its TTL plus grace. Two leases of different
holders conflict when KLIS's matrix says so and their resources overlap;
the younger requester then dies (klock run exits 75) and an older one
waits (Wait-Die).

Columns: lease id, predicate, resource, holder agent and session, the
tenant (uid:N on klockd's socket, a token's name on TCP), how long it has
been held, and when it expires unless heartbeated ("grace": expired, still
held for its grace period).

It asks klockd's lease API on its unix socket (--socket, $KLOCK_API_SOCKET,
default /run/klock/api.sock): root sees every lease, a member of the klock
group only its own uid's. Without klockd, root reads the host's lease store
(/run/klock/leases) itself: embedded klock runs hold their leases there too.

Exit status: 0; 3 when klockd is not running (and klock is not root) or
refused the request.`,
		Example: `  klock leases
  klock leases --json | jq '.[] | select(.predicate == "MUTATES")'
  sudo klock leases revoke l-3f2a9c1e0b7d4a65     # one lease
  sudo klock leases revoke 20250101T120000-a1b2c3 # every lease of a session`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	c.Flags().BoolVar(&o.asJSON, "json", false, "print the leases as JSON (the API's lease objects)")
	c.PersistentFlags().StringVar(&o.socket, "socket", "", "klockd's lease API socket (default $"+leaseapi.SocketEnv+", else "+leaseapi.DefaultSocket+")")
	c.AddCommand(&cobra.Command{
		Use:   "revoke ID",
		Short: "Free a lease, or every lease of a session, at once",
		Long: `revoke frees a lease (its id, l-...) or every lease of a session (its id)
at once, as KLIS's FORCE_REVOKE: whoever waits for the resource can take it.
The holder is not stopped (klock kill ends a session); its next heartbeat is
refused. Root may revoke any lease; a member of the klock group only its own
uid's.

Exit status: 0; 1 when no such lease or session of yours is active; 3 when
klockd is not running or refused the request.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := leaseapi.Dial(o.socket).Revoke(context.Background(), args[0])
			if errors.Is(err, leaseapi.ErrNoServer) && os.Geteuid() == 0 {
				if n, err = revokeLeases(context.Background(), args[0]); err == nil && n == 0 {
					err = fmt.Errorf("%w: no active lease or session %s in the host's lease store", leaseapi.ErrNotFound, args[0])
				}
			}
			if err != nil {
				return leasesError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %d lease(s) of %s\n", n, termsafe.String(args[0]))
			return nil
		},
	})
	return c
}

// run lists the host's leases: from klockd's lease API, or, as root when
// klockd is not running, from the host's lease store itself.
func (o *leasesOptions) run(cmd *cobra.Command, _ []string) error {
	ls, err := leaseapi.Dial(o.socket).List(context.Background(), "")
	if errors.Is(err, leaseapi.ErrNoServer) && os.Geteuid() == 0 {
		ls, err = hostLeaseViews()
	}
	if err != nil {
		return leasesError(err)
	}
	out := cmd.OutOrStdout()
	if o.asJSON {
		if ls == nil {
			ls = []leaseapi.Lease{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(ls)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tPREDICATE\tRESOURCE\tAGENT\tSESSION\tTENANT\tHOST\tAGE\tEXPIRES")
	for _, l := range ls {
		expires := "grace"
		if d := l.ExpiresAt.Sub(now); d > 0 {
			expires = "in " + d.Round(time.Second).String()
		}
		// Other tenants' names (root sees them): printable only.
		host := l.Host
		if host == "" {
			host = "-" // a host-local store: this host
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.LeaseID, l.Predicate, termsafe.String(l.Object),
			termsafe.String(l.AgentID), termsafe.String(l.SessionID), termsafe.String(l.Tenant), termsafe.String(host),
			now.Sub(l.AcquiredAt).Round(time.Second), expires)
	}
	return tw.Flush()
}
