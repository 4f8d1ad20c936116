//go:build linux

package leaseapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/usock"
)

// Defaults.
const (
	// DefaultGroup is the group whose members may use the unix socket.
	DefaultGroup = "klock"
	// DefaultRate and DefaultBurst bound acquires per tenant: generous for
	// an orchestrator of many agents, a wall against one flooding the
	// table every other tenant's decisions scan.
	DefaultRate  = 1000
	DefaultBurst = 2000
)

// Events is a store's event stream (lease.Table has it; so does the host
// store): the server's contention log, its waiters' wake-ups and
// GET /v1/events read it.
type Events interface {
	Subscribe(buf int) (<-chan lease.Event, func())
}

// Config configures a Server.
type Config struct {
	// Store is the lease manager served.
	Store lease.Store
	// Events is its event stream; nil: Store's own (it must have one).
	Events Events
	// Group names the group whose members may use the unix socket besides
	// root, each as its own tenant (default DefaultGroup). When no such
	// group exists only root may.
	Group string
	// Rate is acquires per second per tenant (0: DefaultRate; negative: no
	// limit) and Burst the bucket's size (0: DefaultBurst).
	Rate  float64
	Burst int
	// Logger receives refusals and failures (default slog.Default()).
	Logger *slog.Logger
	// ContentionLog is how many recent contentions GET /v1/contention
	// keeps (default 256).
	ContentionLog int
}

// Server serves the API on any number of listeners (a unix socket, TCP).
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   lease.Store
	events  Events
	owner   usock.Owner
	limits  *limiter
	streams quota // open event streams per tenant
	waiting quota // blocked acquires per tenant
	waiters *dispatcher
	ring    *ring
	mux     http.Handler

	ctx    context.Context
	cancel context.CancelFunc
	unsub  func()
	done   chan struct{}

	// barrier asks the watch goroutine to handle every event already
	// published, then close the channel sent (catchUp).
	barrier chan chan struct{}

	mu      sync.Mutex
	servers []*http.Server
	closing bool
}

// New returns a Server over cfg.Store, watching its events.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("leaseapi: no store")
	}
	if cfg.Events == nil {
		ev, ok := cfg.Store.(Events)
		if !ok {
			return nil, fmt.Errorf("leaseapi: the store (%T) has no event stream", cfg.Store)
		}
		cfg.Events = ev
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.ContentionLog <= 0 {
		cfg.ContentionLog = 256
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, store: cfg.Store, events: cfg.Events, owner: usock.LookupGroup(cfg.Group),
		limits: newLimiter(cfg.Rate, cfg.Burst), ring: newRing(cfg.ContentionLog), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.waiters = newDispatcher(s.store)
	s.mux = s.routes()
	ch, unsub := s.events.Subscribe(4096)
	s.unsub, s.barrier = unsub, make(chan chan struct{})
	go s.watch(ch)
	go s.waiters.run(s.ctx)
	return s, nil
}

// watch feeds the store's events to the contention log and the waiters.
func (s *Server) watch(ch <-chan lease.Event) {
	defer close(s.done)
	handle := func(e lease.Event) {
		switch e.Type {
		case lease.LeaseFreed:
			s.waiters.kick()
		case lease.ContentionDetected:
			s.ring.add(e)
		}
	}
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return
			}
			handle(e)
		case done := <-s.barrier:
			for drained := false; !drained; {
				select {
				case e, ok := <-ch:
					if !ok {
						close(done)
						return
					}
					handle(e)
				default:
					drained = true
				}
			}
			close(done)
		}
	}
}

// catchUp returns once watch has handled every event the store published
// before the call (a store publishes before its call returns), so that a
// caller reads its own contention right after its request was answered.
func (s *Server) catchUp() {
	done := make(chan struct{})
	select {
	case s.barrier <- done:
		<-done
	case <-s.done:
	}
}

// route is one endpoint.
type route struct {
	method, pattern string
	h               func(*Server, http.ResponseWriter, *http.Request, Identity)
}

// routes lists every endpoint the server serves (openapi.yaml documents
// exactly these: TestOpenAPICoversRoutes).
var routes = []route{
	{http.MethodPost, "/v1/manifest", (*Server).manifest},
	{http.MethodPost, "/v1/leases/heartbeat", (*Server).heartbeat},
	{http.MethodPost, "/v1/leases/release", (*Server).release},
	{http.MethodPost, "/v1/leases/reconcile", (*Server).reconcile},
	{http.MethodPost, "/v1/leases/revoke", (*Server).revoke},
	{http.MethodGet, "/v1/leases", (*Server).list},
	{http.MethodGet, "/v1/resource/{object}/state", (*Server).state},
	{http.MethodGet, "/v1/contention", (*Server).contention},
	{http.MethodGet, "/v1/events", (*Server).streamEvents},
	{http.MethodGet, "/v1/openapi.yaml", (*Server).openapi},
}

// routes builds the handler of every endpoint: it expects the caller's
// Identity in the request context (a transport's authentication puts it
// there) and answers every miss with a typed error.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	byPattern := map[string][]route{}
	var order []string
	for _, r := range routes {
		if byPattern[r.pattern] == nil {
			order = append(order, r.pattern)
		}
		byPattern[r.pattern] = append(byPattern[r.pattern], r)
	}
	for _, p := range order {
		rs := byPattern[p]
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			id, ok := identityOf(r.Context())
			if !ok {
				writeError(w, newError(ClassInternal, "no caller identity: the handler was served without authentication"))
				return
			}
			var allow []string
			for _, rt := range rs {
				if rt.method == r.Method {
					rt.h(s, w, r, id)
					return
				}
				allow = append(allow, rt.method)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, newError(ClassMethodNotAllowed, "%s %s: use %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		msg := "no such endpoint " + r.URL.Path + " (see GET /v1/openapi.yaml)"
		if strings.HasPrefix(r.URL.Path, "/v1/resource/") {
			msg += "; the object is one URL-escaped path segment: /v1/resource/FILE:%2Fsrv%2Frepo%2F%2A%2A/state"
		}
		writeError(w, newError(ClassNotFound, "%s", msg))
	})
	return mux
}

// Identity is who a request comes from, as its transport proved it.
type Identity struct {
	// Tenant isolates leases: "uid:N" on the unix socket, a token's tenant
	// on TCP.
	Tenant string
	// Admin sees and may free every tenant's leases (uid 0, or a token
	// marked admin).
	Admin bool
	// Who describes the caller for logs (pid, uid; or the remote address).
	Who string
}

type identKey struct{}

// WithIdentity returns ctx carrying id, for a transport that proved it
// (and for tests of the handler alone).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identKey{}, id)
}

func identityOf(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identKey{}).(Identity)
	return id, ok
}

// Handler serves the API to callers whose Identity is already in the
// request context (WithIdentity): the transports' authentication wraps it.
func (s *Server) Handler() http.Handler { return s.mux }

// serve runs an http.Server for h on ln until Shutdown.
func (s *Server) serve(ln net.Listener, h http.Handler, connCtx func(context.Context, net.Conn) context.Context) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ConnContext:       connCtx,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("leaseapi: serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// Shutdown ends every stream and waiting request (a waiting acquire is
// answered shutting_down), stops the listeners, and waits for requests in
// flight within ctx. The store stays open: it is its owner's.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	servers := s.servers
	s.mu.Unlock()
	s.cancel()
	var err error
	for _, hs := range servers {
		err = errors.Join(err, hs.Shutdown(ctx))
	}
	s.unsub()
	<-s.done
	return err
}
