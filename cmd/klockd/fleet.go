package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/lease/etcdstore"
	"github.com/klocklabs/klock/enforcer/session"
)

// fleetOptions choose klockd's lease store: the host's (default) or one
// shared by a fleet on etcd (docs/leases.md, "A fleet on etcd").
type fleetOptions struct {
	store, endpoints, cacert, cert, key, prefix *string
}

func fleetFlags(fs *flag.FlagSet) *fleetOptions {
	return &fleetOptions{
		store:     fs.String("store", "host", "lease store: host (this host's journal) or etcd (shared by a fleet: --etcd-endpoints)"),
		endpoints: fs.String("etcd-endpoints", "", "etcd client URLs, comma-separated (--store etcd)"),
		cacert:    fs.String("etcd-cacert", "", "CA certificate (PEM) that signs the etcd servers' certificates"),
		cert:      fs.String("etcd-cert", "", "client certificate (PEM) klockd presents to etcd"),
		key:       fs.String("etcd-key", "", "key (PEM) of --etcd-cert"),
		prefix:    fs.String("etcd-prefix", "/klock", "etcd key prefix of this fleet's leases (a tenant of the cluster)"),
	}
}

// errStore: a refused --store configuration.
var errStore = errors.New("lease store")

// wire sets cfg.Leases to the etcd store when --store etcd, and writes the
// marker that makes embedded klock runs on this host refuse (they would
// decide leases without the fleet).
func (o *fleetOptions) wire(cfg *daemon.Config, log *slog.Logger) error {
	switch *o.store {
	case "host", "":
		_ = os.Remove(session.FleetMarker)
		return nil
	case "etcd":
	default:
		return fmt.Errorf("%w: --store %q: want host or etcd", errStore, *o.store)
	}
	if *o.endpoints == "" {
		return fmt.Errorf("%w: --store etcd needs --etcd-endpoints", errStore)
	}
	var tc *tls.Config
	if *o.cacert != "" || *o.cert != "" {
		var err error
		tc, err = transport.TLSInfo{TrustedCAFile: *o.cacert, CertFile: *o.cert, KeyFile: *o.key}.ClientConfig()
		if err != nil {
			return fmt.Errorf("%w: etcd TLS: %v", errStore, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*o.endpoints, ","), DialTimeout: 5 * time.Second, TLS: tc})
	if err != nil {
		return fmt.Errorf("%w: etcd: %v", errStore, err)
	}
	host, _ := os.Hostname()
	cfg.Leases = etcdstore.New(cli, *o.prefix, host)
	if err := session.WriteFleetMarker("etcd " + *o.endpoints + " " + *o.prefix); err != nil {
		return fmt.Errorf("%w: %v", errStore, err)
	}
	log.Info("leases shared on etcd", "endpoints", *o.endpoints, "prefix", *o.prefix)
	return nil
}

// unwire removes the fleet marker when klockd stops: embedded runs may use
// the host's journal again (they still see no fleet lease: the operator
// who mixes both on one host chose that).
func (o *fleetOptions) unwire() {
	if *o.store == "etcd" {
		_ = os.Remove(session.FleetMarker)
	}
}
