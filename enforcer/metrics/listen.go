package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/klocklabs/klock/internal/hostlisten"
)

// ListenOptions configure the /metrics listener (klockd --metrics-listen).
type ListenOptions struct {
	Addr string
	// CertFile and KeyFile turn TLS on; required unless Addr is loopback.
	CertFile, KeyFile string
}

// InsecureListenError refuses a non-loopback metrics address without TLS.
type InsecureListenError struct{ Addr string }

func (e *InsecureListenError) Error() string {
	return fmt.Sprintf("metrics: --metrics-listen %s is not a loopback address: give --metrics-tls-cert and --metrics-tls-key, or listen on 127.0.0.1", e.Addr)
}

// Listen checks o and listens (internal/hostlisten's rule): a
// non-loopback address without TLS is an *InsecureListenError.
func Listen(o ListenOptions) (net.Listener, error) {
	ln, err := hostlisten.Listen(o.Addr, o.CertFile, o.KeyFile)
	switch {
	case errors.Is(err, hostlisten.ErrNotLoopback):
		return nil, &InsecureListenError{Addr: o.Addr}
	case errors.Is(err, hostlisten.ErrHalfTLS):
		return nil, errors.New("metrics: TLS needs both --metrics-tls-cert and --metrics-tls-key")
	case err != nil:
		return nil, fmt.Errorf("metrics: --metrics-listen %s: %w", o.Addr, err)
	}
	return ln, nil
}

// Server serves /metrics on ln until Shutdown.
func (m *Metrics) Server() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
