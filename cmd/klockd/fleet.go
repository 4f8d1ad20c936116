package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/enforcer/lease/etcdstore"
)

// fleetOptions choose klockd's lease store: the host's (default) or one
// shared by a fleet on etcd (docs/leases.md, "A fleet on etcd").
type fleetOptions struct {
	store, endpoints, cacert, cert, key, prefix, host *string
}

func fleetFlags(fs *flag.FlagSet) *fleetOptions {
	return &fleetOptions{
		store:     fs.String("store", "host", "lease store: host (this host's journal) or etcd (shared by a fleet: --etcd-endpoints)"),
		endpoints: fs.String("etcd-endpoints", "", "etcd client URLs, comma-separated (--store etcd)"),
		cacert:    fs.String("etcd-cacert", "", "CA certificate (PEM) that signs the etcd servers' certificates"),
		cert:      fs.String("etcd-cert", "", "client certificate (PEM) klockd presents to etcd"),
		key:       fs.String("etcd-key", "", "key (PEM) of --etcd-cert"),
		prefix:    fs.String("etcd-prefix", fleet.DefaultPrefix, "etcd key prefix of this fleet's leases (a tenant of the cluster)"),
		host:      fs.String("host-name", "", "this host's name in the fleet, shown by klock leases (default: the host name)"),
	}
}

// errStore: a refused --store configuration.
var errStore = errors.New("lease store")

// wire sets cfg.Leases to the etcd store when --store etcd, and writes the
// marker that makes embedded klock runs on this host refuse (they would
// decide leases without the fleet) and tells the host's gateways where the
// fleet is.
func (o *fleetOptions) wire(cfg *daemon.Config, log *slog.Logger) error {
	switch *o.store {
	case "host", "":
		fleet.RemoveMarker()
		return nil
	case "etcd":
	default:
		return fmt.Errorf("%w: --store %q: want host or etcd", errStore, *o.store)
	}
	cli, fc, err := fleet.Dial(fleet.Config{Endpoints: fleet.Endpoints(*o.endpoints), CACert: *o.cacert,
		Cert: *o.cert, Key: *o.key, Prefix: *o.prefix, Host: *o.host})
	if err != nil {
		return fmt.Errorf("%w: --store etcd: %w", errStore, err)
	}
	cfg.Leases = etcdstore.New(cli, fc.Prefix, fc.Host)
	if err := fleet.WriteMarker(fc); err != nil {
		return fmt.Errorf("%w: %v", errStore, err)
	}
	log.Info("leases shared on etcd", "fleet", fc.String())
	return nil
}

// unwire removes the fleet marker when klockd stops: embedded runs may use
// the host's journal again (they still see no fleet lease: the operator
// who mixes both on one host chose that).
func (o *fleetOptions) unwire() {
	if *o.store == "etcd" {
		fleet.RemoveMarker()
	}
}
