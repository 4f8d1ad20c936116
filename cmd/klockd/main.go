// Command klockd is klock's daemon: it keeps the BPF programs loaded and runs
// sessions for klock run, klock ps and klock kill over a unix socket (see
// package enforcer/daemon), and is its host's lease manager, serving the
// KLIS-7 lease API on a second socket and optionally on TCP (see package
// enforcer/leaseapi).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy/trust"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// options are klockd's command-line flags (klockd has no config file).
type options struct {
	socket, group string
	debug         bool
	linger        time.Duration
	trustKeys     multiFlag
	requireSigned bool
	trustDir      string
	api           *apiOptions
	metrics       *metricsOptions
	events        *eventsOptions
}

func main() {
	// Stage 2 of every session klockd launches: becomes the agent.
	launch.Init()
	o := parseFlags()
	level := slog.LevelInfo
	if o.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "klockd: needs root (it loads BPF programs and launches sessions)")
		os.Exit(1)
	}
	cfg, err := o.config(log)
	if err != nil {
		fatal(err)
	}
	// A refused API configuration (TCP without tokens, or without TLS
	// off loopback) stops klockd before anything is loaded.
	tcp, err := o.api.listenTCP()
	if err != nil {
		fatal(err)
	}
	// So does a refused metrics address (off loopback without TLS).
	m, mln, err := o.metrics.open()
	if err != nil {
		fatal(err)
	}
	if err := o.metrics.wire(m, &cfg); err != nil {
		fatal(err)
	}
	srv, err := daemon.Listen(cfg)
	if err != nil {
		fatal(err)
	}
	bpfStatsOff, err := o.metrics.enableBPFStats(m, srv)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		fatal(err)
	}
	log.Info("klockd listening", "socket", srv.Addr(), "group", o.group, "require_signed", o.requireSigned)
	ok := serve(srv, o, log, tcp, metricsListener{m, mln})
	bpfStatsOff()
	if !ok {
		os.Exit(1)
	}
	log.Info("klockd stopped")
}

// parseFlags reads klockd's command line.
func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.socket, "socket", daemon.DefaultSocket, "unix socket to serve on")
	flag.StringVar(&o.group, "group", daemon.DefaultGroup, "group whose members may create sessions besides root")
	flag.BoolVar(&o.debug, "debug", false, "log debug messages")
	flag.DurationVar(&o.linger, "syscall-linger", daemon.DefaultSyscallLinger, "keep the syscall tracepoints attached this long after the last session that needs them (0: detach at once), so back-to-back sessions skip the attach")
	flag.BoolVar(&o.requireSigned, "require-signed", false, "refuse every session whose manifest is unsigned, altered since signing, or signed by a key that is not trusted (klockd has no config file: this flag is its require_signature policy)")
	flag.Var(&o.trustKeys, "trust", "trust this signing key besides those in --trust-dir (a .pub file or ed25519:<base64>; repeatable)")
	flag.StringVar(&o.trustDir, "trust-dir", trust.DefaultDir, "directory of trusted signing keys (*.pub)")
	o.api = apiFlags()
	o.metrics = metricsFlags()
	o.events = eventsFlags()
	flag.Parse()
	return o
}

// config is the daemon's configuration from the flags: its socket and
// group, the manifest admitter (--require-signed, the trusted keys), the
// events file and how long the syscall tracepoints linger.
func (o *options) config(log *slog.Logger) (daemon.Config, error) {
	cfg := daemon.Config{Socket: o.socket, Group: o.group, Logger: log}
	if o.trustDir == "" {
		o.trustDir = "-"
	}
	// Read once at start: a root added later needs a restart, as any
	// change of klockd's policy does.
	admit, err := trust.Options{RequireSigned: o.requireSigned, Keys: o.trustKeys, Dir: o.trustDir}.Admitter()
	if err != nil {
		return cfg, err
	}
	cfg.Admit = admit
	if cfg.EventsFile, err = o.events.open(); err != nil {
		return cfg, err
	}
	cfg.Observe.SyscallLinger = o.linger
	if o.linger == 0 {
		cfg.Observe.SyscallLinger = -1 // none (a zero Config field means the default)
	}
	return cfg, nil
}

// serve serves sessions, the lease API and the metrics until SIGTERM or
// SIGINT or a server fails, then shuts them down (killing every session);
// it reports whether all of that went without error.
func serve(srv *daemon.Server, o *options, log *slog.Logger, tcp tcpListener, ml metricsListener) bool {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 4)
	stopMetrics := serveMetrics(ml, *o.metrics.cert != "", log, served)
	go func() { served <- srv.Serve() }()
	apiSrv, err := o.api.serve(srv.Leases(), o.group, log, tcp, served)
	if err != nil {
		log.Error("lease API", "error", err)
	}
	if err == nil {
		select {
		case sig := <-sigs:
			log.Info("shutting down: killing every session", "signal", sig.String())
		case err := <-served:
			log.Error("serve failed", "error", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed := err != nil
	if apiSrv != nil {
		if err := apiSrv.Shutdown(ctx); err != nil {
			log.Error("lease API shutdown", "error", err)
			failed = true
		}
	}
	if err := stopMetrics(ctx); err != nil {
		log.Error("metrics shutdown", "error", err)
		failed = true
	}
	if err := srv.Shutdown(ctx); err != nil {
		log.Error("shutdown", "error", err)
		failed = true
	}
	return !failed
}

// fatal reports an error that stops klockd before it serves.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "klockd:", err)
	os.Exit(1)
}
