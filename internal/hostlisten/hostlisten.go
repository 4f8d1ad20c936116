// Package hostlisten opens the TCP listeners of klock's HTTP endpoints
// (the KLIS-7 lease API, klockd's metrics) under one rule: an address that
// reaches only this host (loopback), or TLS. A credential or a host's
// figures never cross a network in clear.
//
// Errors: ErrHalfTLS (a certificate without its key, or the reverse),
// ErrNotLoopback (a non-loopback address without TLS); callers wrap them
// in their own typed errors, which name their flags. A bad address, a
// key pair that does not load and a failed listen are returned as they
// are.
package hostlisten

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
)

var (
	// ErrHalfTLS: TLS needs both a certificate and its key.
	ErrHalfTLS = errors.New("TLS needs both a certificate and its key")
	// ErrNotLoopback: the address reaches other hosts and no TLS was given.
	ErrNotLoopback = errors.New("not a loopback address, and no TLS")
)

// Listen listens on addr (host:port), with TLS when certFile and keyFile
// are given; without them addr must be a loopback address.
func Listen(addr, certFile, keyFile string) (net.Listener, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, ErrHalfTLS
	}
	loop, err := Loopback(addr)
	if err != nil {
		return nil, err
	}
	var cfg *tls.Config
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	} else if !loop {
		return nil, ErrNotLoopback
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil || cfg == nil {
		return ln, err
	}
	return tls.NewListener(ln, cfg), nil
}

// Loopback reports whether a listen address reaches only this host: an IP
// literal in 127.0.0.0/8 or ::1, or "localhost". An empty host is every
// interface.
func Loopback(addr string) (bool, error) {
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
