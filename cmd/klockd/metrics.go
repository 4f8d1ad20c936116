package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"

	"github.com/klocklabs/klock/enforcer/metrics"
)

// metricsOptions are klockd's flags for its Prometheus metrics (package
// enforcer/metrics): off unless --metrics-listen is set.
type metricsOptions struct {
	listen, cert, key *string
}

func metricsFlags(fs *flag.FlagSet) *metricsOptions {
	return &metricsOptions{
		listen: fs.String("metrics-listen", "", "serve Prometheus metrics on http://ADDR/metrics (off by default; TLS required unless the address is loopback; port 0 picks one, logged)"),
		cert:   fs.String("metrics-tls-cert", "", "TLS certificate (PEM) of --metrics-listen"),
		key:    fs.String("metrics-tls-key", "", "TLS private key (PEM) of --metrics-tls-cert"),
	}
}

// open checks the flags and listens when asked: nil Metrics and
// listener when --metrics-listen is not set.
func (o *metricsOptions) open() (*metrics.Metrics, net.Listener, error) {
	if *o.listen == "" {
		if *o.cert != "" || *o.key != "" {
			return nil, nil, errors.New("--metrics-tls-cert and --metrics-tls-key configure --metrics-listen, which is not set")
		}
		return nil, nil, nil
	}
	ln, err := metrics.Listen(metrics.ListenOptions{Addr: *o.listen, CertFile: *o.cert, KeyFile: *o.key})
	if err != nil {
		return nil, nil, err
	}
	return metrics.New(), ln, nil
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
