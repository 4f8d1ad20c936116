package main

import (
	"errors"
	"flag"
	"log/slog"
	"net"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/leaseapi"
)

// apiOptions are klockd's flags for its lease API (package
// enforcer/leaseapi).
type apiOptions struct {
	socket, listen, tokens, cert, key *string
	rate                              *float64
	off                               *bool
}

func apiFlags(fs *flag.FlagSet) *apiOptions {
	return &apiOptions{
		socket: fs.String("api-socket", leaseapi.DefaultSocket, "unix socket of the KLIS-7 lease API (0660 root:<group>; each uid of the group is its own tenant, root sees all)"),
		listen: fs.String("api-listen", "", "also serve the lease API on TCP at this address (bearer tokens from --api-tokens; TLS required unless the address is loopback)"),
		tokens: fs.String("api-tokens", "", `the lease API's bearer tokens on TCP: a 0600 file of "TENANT TOKEN [admin]" lines`),
		cert:   fs.String("api-tls-cert", "", "TLS certificate (PEM) of the lease API on TCP"),
		key:    fs.String("api-tls-key", "", "TLS private key (PEM) of --api-tls-cert"),
		rate:   fs.Float64("api-rate", leaseapi.DefaultRate, "lease acquires per second per tenant through the API (0 or negative: no limit)"),
		off:    fs.Bool("no-api", false, "serve no lease API (sessions still take leases)"),
	}
}

// listenTCP checks the API's flags and listens on TCP when asked.
func (o *apiOptions) listenTCP() (tcpListener, error) {
	if *o.listen == "" {
		if *o.tokens != "" || *o.cert != "" || *o.key != "" {
			return tcpListener{}, errors.New("--api-tokens, --api-tls-cert and --api-tls-key configure --api-listen, which is not set")
		}
		return tcpListener{}, nil
	}
	if *o.off {
		return tcpListener{}, errors.New("--no-api and --api-listen contradict each other")
	}
	ln, tokens, err := leaseapi.ListenTCP(leaseapi.TCPOptions{Addr: *o.listen, TokensFile: *o.tokens, CertFile: *o.cert, KeyFile: *o.key})
	return tcpListener{ln, tokens}, err
}

// serve starts the API over store on its socket (sock, when systemd made
// it; and tcp, when set); its listeners' failures go to served. nil
// Server with --no-api.
func (o *apiOptions) serve(store lease.Store, group string, log *slog.Logger, tcp tcpListener, sock *net.UnixListener, served chan<- error) (*leaseapi.Server, error) {
	if *o.off {
		return nil, nil
	}
	rate := *o.rate
	if rate == 0 {
		rate = -1 // leaseapi reads 0 as its default; the flag's 0 means no limit
	}
	s, err := leaseapi.New(leaseapi.Config{Store: store, Group: group, Rate: rate, Logger: log})
	if err != nil {
		return nil, err
	}
	ln := sock
	if ln == nil {
		if ln, err = leaseapi.ListenUnix(*o.socket, group); err != nil {
			return s, err
		}
	}
	go func() { served <- s.ServeUnix(ln) }()
	log.Info("lease API listening", "socket", *o.socket)
	if tcp.ln != nil {
		go func() { served <- s.ServeTCP(tcp.ln, tcp.tokens) }()
		log.Info("lease API listening", "tcp", tcp.ln.Addr().String(), "tls", *o.cert != "")
	}
	return s, nil
}

type tcpListener struct {
	ln     net.Listener
	tokens *leaseapi.Tokens
}
