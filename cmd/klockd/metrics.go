package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/cilium/ebpf"
	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/metrics"
	"github.com/klocklabs/klock/enforcer/session"
)

// metricsOptions are klockd's flags for its Prometheus metrics (package
// enforcer/metrics): off unless --metrics-listen is set.
type metricsOptions struct {
	listen, cert, key *string
	bpfStats          *bool
}

func metricsFlags(fs *flag.FlagSet) *metricsOptions {
	return &metricsOptions{
		listen: fs.String("metrics-listen", "", "serve Prometheus metrics on http://ADDR/metrics (off by default; TLS required unless the address is loopback; port 0 picks one, logged)"),
		cert:   fs.String("metrics-tls-cert", "", "TLS certificate (PEM) of --metrics-listen"),
		key:    fs.String("metrics-tls-key", "", "TLS private key (PEM) of --metrics-tls-cert"),
		bpfStats: fs.Bool("metrics-bpf-stats", false, "turn the kernel's BPF run-time statistics on while klockd runs and serve klockd's programs' run time "+
			"(klock_bpf_program_run_seconds_total); costs tens of nanoseconds per run of every BPF program on the host, every syscall while the tracepoints are attached"),
	}
}

// open checks the flags and listens when asked: nil Metrics and
// listener when --metrics-listen is not set.
func (o *metricsOptions) open() (*metrics.Metrics, net.Listener, error) {
	if *o.listen == "" {
		if *o.cert != "" || *o.key != "" || *o.bpfStats {
			return nil, nil, errors.New("--metrics-tls-cert, --metrics-tls-key and --metrics-bpf-stats configure --metrics-listen, which is not set")
		}
		return nil, nil, nil
	}
	ln, err := metrics.Listen(metrics.ListenOptions{Addr: *o.listen, CertFile: *o.cert, KeyFile: *o.key})
	if err != nil {
		return nil, nil, err
	}
	return metrics.New(), ln, nil
}

// wire has the daemon tell m of its sessions and count its lease store's
// decisions (its sessions' and the lease API's: they share the store).
func (o *metricsOptions) wire(m *metrics.Metrics, cfg *daemon.Config) error {
	if m == nil {
		return nil
	}
	cfg.Observer = m
	// The guard's records that gateways publish to klockd move the
	// guard's metrics.
	cfg.EventSinks = append(cfg.EventSinks, m)
	store := cfg.Leases
	if store == nil {
		var err error
		if store, err = session.HostLeases(); err != nil {
			return fmt.Errorf("the host's lease store: %w", err)
		}
	}
	cfg.Leases = metrics.Leases(store, m)
	return nil
}

// enableBPFStats turns the kernel's BPF statistics on when
// --metrics-bpf-stats asks, reporting the programs of srv's backends; the
// returned func turns them off.
func (o *metricsOptions) enableBPFStats(m *metrics.Metrics, srv *daemon.Server) (func(), error) {
	if m == nil || !*o.bpfStats {
		return func() {}, nil
	}
	stats, err := m.EnableBPFStats(func() map[string]map[string]*ebpf.Program { return srv.Backends().Programs() })
	if err != nil {
		return nil, err
	}
	return func() { _ = stats.Close() }, nil
}

// metricsListener is the metrics and their listener (nil, nil when off).
type metricsListener struct {
	m  *metrics.Metrics
	ln net.Listener
}

// serveMetrics serves the metrics on their listener (nothing when off);
// a failure goes to served. The returned func shuts it down.
func serveMetrics(ml metricsListener, tls bool, log *slog.Logger, served chan<- error) func(context.Context) error {
	m, ln := ml.m, ml.ln
	if m == nil || ln == nil {
		return func(context.Context) error { return nil }
	}
	srv := m.Server()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			served <- err
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String(), "path", "/metrics", "tls", tls)
	return srv.Shutdown
}
