package metrics

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
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

// Listen checks o and listens: a non-loopback address without TLS is an
// *InsecureListenError.
func Listen(o ListenOptions) (net.Listener, error) {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("metrics: TLS needs both --metrics-tls-cert and --metrics-tls-key")
	}
	loop, err := loopback(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: --metrics-listen %q: %w", o.Addr, err)
	}
	var cfg *tls.Config
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("metrics: TLS: %w", err)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	} else if !loop {
		return nil, &InsecureListenError{Addr: o.Addr}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return ln, nil
}

// loopback reports whether a listen address reaches only this host (an
// empty host is every interface).
func loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// Server serves /metrics on ln until Shutdown.
func (m *Metrics) Server() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
