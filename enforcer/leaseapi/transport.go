//go:build linux

package leaseapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/klocklabs/klock/enforcer/usock"
	"github.com/klocklabs/klock/internal/hostlisten"
)

// ListenUnix makes the API's unix socket at path: 0660 root:group (its
// directory 0750 root:group when missing), as klockd's session socket is
// made (usock.Listen).
func ListenUnix(path, group string) (*net.UnixListener, error) {
	if group == "" {
		group = DefaultGroup
	}
	ln, err := usock.Listen(path, 0o660, 0o750, usock.LookupGroup(group))
	if err != nil {
		return nil, fmt.Errorf("leaseapi: %s: %w", path, err)
	}
	return ln, nil
}

// connPeer is a unix connection's caller, identified once, on its first
// request, in the connection's own goroutine.
type connPeer struct {
	c    *net.UnixConn
	once sync.Once
	id   Identity
	err  *Error
}

type connPeerKey struct{}

// ServeUnix serves the API on a unix socket until Shutdown. Every
// connection's caller is identified by the kernel (SO_PEERCRED: see the
// package documentation) before any request of it is served.
func (s *Server) ServeUnix(ln *net.UnixListener) error {
	connCtx := func(ctx context.Context, c net.Conn) context.Context {
		uc, _ := c.(*net.UnixConn)
		return context.WithValue(ctx, connPeerKey{}, &connPeer{c: uc})
	}
	return s.serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cp, _ := r.Context().Value(connPeerKey{}).(*connPeer)
		if cp == nil || cp.c == nil {
			writeError(w, newError(ClassForbidden, "not a unix socket connection: the caller cannot be identified"))
			return
		}
		cp.once.Do(func() { cp.id, cp.err = s.unixIdentity(cp.c) })
		if cp.err != nil {
			writeError(w, cp.err)
			return
		}
		s.mux.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), cp.id)))
	}), connCtx)
}

// unixIdentity decides who a unix peer is, from what the kernel says.
func (s *Server) unixIdentity(c *net.UnixConn) (Identity, *Error) {
	p, err := usock.PeerOf(c)
	if err != nil {
		s.log.Warn("lease API: refused a peer", "peer", p.String(), "error", err)
		return Identity{}, newError(ClassForbidden, "cannot verify the peer: %v", err)
	}
	id := Identity{Tenant: fmt.Sprintf("uid:%d", p.UID), Who: fmt.Sprintf("pid %d uid %d", p.PID, p.UID)}
	switch {
	case usock.InSessionCgroup(p.Cgroup):
		s.log.Warn("lease API: refused a peer", "peer", p.String(), "error", usock.ErrInSession)
		return id, newError(ClassForbidden, "%v (%s)", usock.ErrInSession, p)
	case p.UID == 0:
		id.Admin = true
	case s.owner.HasGroup && p.InGroup(s.owner.GID):
	case s.owner.HasGroup:
		return id, newError(ClassForbidden, "uid %d is neither root nor a member of group %q", p.UID, s.cfg.Group)
	default:
		return id, newError(ClassForbidden, "uid %d is not root (group %q does not exist, so only root may use the lease API)", p.UID, s.cfg.Group)
	}
	return id, nil
}

// TCPOptions configure the API on TCP (klockd --api-listen).
type TCPOptions struct {
	Addr string
	// TokensFile holds the bearer tokens (LoadTokens): required.
	TokensFile string
	// CertFile and KeyFile turn TLS on; required unless Addr is loopback.
	CertFile, KeyFile string
}

// ListenTCP checks o and listens: tokens are required, and a non-loopback
// address without TLS is refused (bearer tokens would cross a network in
// clear).
func ListenTCP(o TCPOptions) (net.Listener, *Tokens, error) {
	if o.TokensFile == "" {
		return nil, nil, fmt.Errorf("%w: the API on TCP (%s) needs a tokens file (--api-tokens): on TCP the caller is who its bearer token says", ErrConfig, o.Addr)
	}
	tokens, err := LoadTokens(o.TokensFile)
	if err != nil {
		return nil, nil, err
	}
	ln, err := hostlisten.Listen(o.Addr, o.CertFile, o.KeyFile)
	switch {
	case errors.Is(err, hostlisten.ErrHalfTLS):
		return nil, nil, fmt.Errorf("%w: TLS needs both a certificate (--api-tls-cert) and its key (--api-tls-key)", ErrConfig)
	case errors.Is(err, hostlisten.ErrNotLoopback):
		return nil, nil, fmt.Errorf("%w: --api-listen %s is not a loopback address: bearer tokens would cross the network in clear; give --api-tls-cert and --api-tls-key, or listen on 127.0.0.1", ErrConfig, o.Addr)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: --api-listen %q: %v", ErrConfig, o.Addr, err)
	}
	return ln, tokens, nil
}

// ServeTCP serves the API on ln (from ListenTCP) until Shutdown: every
// request must carry "Authorization: Bearer TOKEN" for one of tokens.
func (s *Server) ServeTCP(ln net.Listener, tokens *Tokens) error {
	if tokens == nil {
		return fmt.Errorf("%w: the API on TCP needs tokens", ErrConfig)
	}
	return s.serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="klock"`)
			writeError(w, newError(ClassUnauthorized, "send Authorization: Bearer TOKEN (a token of the API's tokens file)"))
			return
		}
		e, found := tokens.lookup(strings.TrimSpace(tok))
		if !found {
			s.log.Warn("lease API: refused a bearer token", "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="klock", error="invalid_token"`)
			writeError(w, newError(ClassUnauthorized, "unknown token"))
			return
		}
		id := Identity{Tenant: e.tenant, Admin: e.admin, Who: "tcp " + r.RemoteAddr}
		s.mux.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	}), nil)
}
