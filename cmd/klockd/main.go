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

func main() {
	// Stage 2 of every session klockd launches: becomes the agent.
	launch.Init()
	socket := flag.String("socket", daemon.DefaultSocket, "unix socket to serve on")
	group := flag.String("group", daemon.DefaultGroup, "group whose members may create sessions besides root")
	debug := flag.Bool("debug", false, "log debug messages")
	linger := flag.Duration("syscall-linger", daemon.DefaultSyscallLinger, "keep the syscall tracepoints attached this long after the last session that needs them (0: detach at once), so back-to-back sessions skip the attach")
	var trustKeys multiFlag
	requireSigned := flag.Bool("require-signed", false, "refuse every session whose manifest is unsigned, altered since signing, or signed by a key that is not trusted (klockd has no config file: this flag is its require_signature policy)")
	flag.Var(&trustKeys, "trust", "trust this signing key besides those in --trust-dir (a .pub file or ed25519:<base64>; repeatable)")
	trustDir := flag.String("trust-dir", trust.DefaultDir, "directory of trusted signing keys (*.pub)")
	api := apiFlags()
	flag.Parse()

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "klockd: needs root (it loads BPF programs and launches sessions)")
		os.Exit(1)
	}
	cfg := daemon.Config{Socket: *socket, Group: *group, Logger: log}
	if *trustDir == "" {
		*trustDir = "-"
	}
	// Read once at start: a root added later needs a restart, as any
	// change of klockd's policy does.
	admit, err := trust.Options{RequireSigned: *requireSigned, Keys: trustKeys, Dir: *trustDir}.Admitter()
	if err != nil {
		fmt.Fprintln(os.Stderr, "klockd:", err)
		os.Exit(1)
	}
	cfg.Admit = admit
	cfg.Observe.SyscallLinger = *linger
	if *linger == 0 {
		cfg.Observe.SyscallLinger = -1 // none (a zero Config field means the default)
	}
	// A refused API configuration (TCP without tokens, or without TLS
	// off loopback) stops klockd before anything is loaded.
	tcp, err := api.listenTCP()
	if err != nil {
		fmt.Fprintln(os.Stderr, "klockd:", err)
		os.Exit(1)
	}
	srv, err := daemon.Listen(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "klockd:", err)
		os.Exit(1)
	}
	log.Info("klockd listening", "socket", srv.Addr(), "group", *group, "require_signed", *requireSigned)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 3)
	go func() { served <- srv.Serve() }()
	apiSrv, err := api.serve(srv.Leases(), *group, log, tcp, served)
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
	if err := srv.Shutdown(ctx); err != nil {
		log.Error("shutdown", "error", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
	log.Info("klockd stopped")
}
