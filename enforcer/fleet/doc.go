// Package fleet owns how a host reaches the etcd cluster its fleet shares
// (docs/leases.md, "A fleet on etcd"): the connection settings (Config),
// the client they dial, and the marker klockd writes while it shares this
// host's leases, budgets and approvals with a fleet.
//
// The marker (/run/klock/fleet.json, or $KLOCK_FLEET_MARKER; root-written,
// world-readable) holds
// the Config itself, so that every klock process of the host that must
// act fleet-wide (a tool gateway's leases and budget, klock approvals)
// reaches the same cluster under the same prefix as klockd, and an
// embedded klock run, which would decide leases from this host's journal
// alone, knows to refuse.
//
// Errors: ErrConfig wraps a refused configuration (missing endpoints, an
// unreadable certificate, a marker that does not parse); ReadMarker
// returns ErrNoFleet (wrapping fs.ErrNotExist) when the host is in no
// fleet. Dial does not contact the cluster: an unreachable cluster shows
// on the first request, as etcdstore.ErrNoEtcd and its kin.
package fleet
