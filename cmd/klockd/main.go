// Command klockd is klock's daemon: it keeps the BPF programs loaded and runs
// sessions for klock run, klock ps and klock kill over a unix socket (see
// package enforcer/daemon), and is its host's lease manager, serving the
// KLIS-7 lease API on a second socket and optionally on TCP (see package
// enforcer/leaseapi).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/internal/logswitch"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/celexpr"
	"github.com/klocklabs/klock/policy/trust"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// options are klockd's settings: its flags, under which its configuration
// file (--config, see config.go) fills what the command line leaves unset.
type options struct {
	fs *flag.FlagSet
	// args are the command line, read again by a reload.
	args                []string
	configFile          string
	socket, group       string
	debug               bool
	logFormat, logLevel string
	linger              time.Duration
	trustKeys           multiFlag
	requireSigned       bool
	trustDir            string
	api                 *apiOptions
	metrics             *metricsOptions
	events              *eventsOptions
	fleet               *fleetOptions
}

func main() {
	// Stage 2 of every session klockd launches: becomes the agent.
	launch.Init()
	// Manifests are checked whole, their autonomy conditions included.
	policy.UseConditions(celexpr.Compiler{})
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fatal(err)
	}
	logs, err := o.logSwitch(os.Stderr)
	if err != nil {
		fatal(err)
	}
	log := slog.New(logs.Handler())
	slog.SetDefault(log)
	if os.Geteuid() != 0 {
		fatal(errors.New("needs root (it loads BPF programs and launches sessions)"))
	}
	if !run(o, log, logs) {
		os.Exit(1)
	}
	log.Info("klockd stopped")
}

// run starts klockd's servers and serves until it is told to stop; it
// reports whether all of that went without error.
func run(o *options, log *slog.Logger, logs *logswitch.Switch) bool {
	r := newReloader(o, log, logs)
	cfg, err := o.config(log, r)
	if err != nil {
		fatal(err)
	}
	defer o.fleet.unwire()
	// Sockets systemd made (klockd.socket) replace the ones klockd would.
	sockets, err := activated(o)
	if err != nil {
		fatal(err)
	}
	cfg.Listener = sockets.session
	if *o.api.off && sockets.api != nil {
		// Clients of the API socket would wait on a socket nobody serves.
		log.Warn("--no-api, yet systemd passed the lease API socket: drop its ListenStream= from klockd.socket", "socket", sockets.api.Addr().String())
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
	defer bpfStatsOff()
	r.observer = srv.Backends().Observer
	log.Info("klockd listening", "socket", srv.Addr(), "systemd_socket", cfg.Listener != nil, "group", o.group,
		"require_signed", o.requireSigned, "config", o.configFile)
	return serve(srv, o, log, tcp, metricsListener{m, mln}, sockets.api, r)
}

// newOptions defines klockd's flags on a flag set of their own, so that a
// reload (SIGHUP) can read them again into fresh options.
func newOptions() *options {
	fs := flag.NewFlagSet("klockd", flag.ContinueOnError)
	o := &options{fs: fs}
	fs.StringVar(&o.configFile, "config", DefaultConfig, `configuration file: its settings are the flags' (a flag on the command line wins); "" reads none. SIGHUP re-reads it`)
	fs.StringVar(&o.socket, "socket", daemon.DefaultSocket, "unix socket to serve on (under systemd socket activation: the socket klockd.socket passes, which must be this path)")
	fs.StringVar(&o.group, "group", daemon.DefaultGroup, "group whose members may create sessions besides root")
	fs.BoolVar(&o.debug, "debug", false, "log debug messages (--log-level debug)")
	fs.StringVar(&o.logFormat, "log-format", string(logswitch.Text), "log format on stderr: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "least severe level logged: debug, info, warn or error")
	fs.DurationVar(&o.linger, "syscall-linger", daemon.DefaultSyscallLinger, "keep the syscall tracepoints attached this long after the last session that needs them (0: detach at once), so back-to-back sessions skip the attach")
	fs.BoolVar(&o.requireSigned, "require-signed", false, "refuse every session whose manifest is unsigned, altered since signing, or signed by a key that is not trusted (klockd's require_signature policy)")
	fs.Var(&o.trustKeys, "trust", "trust this signing key besides those in --trust-dir (a .pub file or ed25519:<base64>; repeatable)")
	fs.StringVar(&o.trustDir, "trust-dir", trust.DefaultDir, "directory of trusted signing keys (*.pub)")
	o.api = apiFlags(fs)
	o.metrics = metricsFlags(fs)
	o.fleet = fleetFlags(fs)
	o.events = eventsFlags(fs)
	return o
}

// parseOptions reads the command line, then the configuration file under
// it.
func parseOptions(args []string) (*options, error) {
	o := newOptions()
	o.args = args
	o.fs.SetOutput(io.Discard)
	if err := o.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			o.fs.SetOutput(os.Stderr)
			o.fs.Usage()
			os.Exit(0)
		}
		return nil, err
	}
	if o.fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (klockd takes flags only)", o.fs.Arg(0))
	}
	if err := o.loadConfig(); err != nil {
		return nil, err
	}
	return o, nil
}

// logSwitch is klockd's log handler, per --log-format and --log-level.
func (o *options) logSwitch(w io.Writer) (*logswitch.Switch, error) {
	f, l, err := o.logSettings()
	if err != nil {
		return nil, err
	}
	return logswitch.New(w, f, l), nil
}

func (o *options) logSettings() (logswitch.Format, slog.Level, error) {
	f, err := logswitch.ParseFormat(o.logFormat)
	if err != nil {
		return "", 0, err
	}
	l, err := logswitch.ParseLevel(o.logLevel)
	if err != nil {
		return "", 0, err
	}
	if o.debug {
		l = slog.LevelDebug
	}
	return f, l, nil
}

// admitter is the manifest admitter of --require-signed and the trusted
// keys (read now: a key added later takes a reload).
func (o *options) admitter() (func(*policy.Manifest) error, error) {
	dir := o.trustDir
	if dir == "" {
		dir = "-"
	}
	return trust.Options{RequireSigned: o.requireSigned, Keys: o.trustKeys, Dir: dir}.Admitter()
}

// config is the daemon's configuration from the options: its socket and
// group, the manifest admitter (r's, which a reload replaces), the events
// file and how long the syscall tracepoints linger.
func (o *options) config(log *slog.Logger, r *reloader) (daemon.Config, error) {
	cfg := daemon.Config{Socket: o.socket, Group: o.group, Logger: log}
	admit, err := o.admitter()
	if err != nil {
		return cfg, err
	}
	r.admit.Store(&admit)
	cfg.Admit = r.admitNow
	if err := o.fleet.wire(&cfg, log); err != nil {
		return cfg, err
	}
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
// it reports whether all of that went without error. SIGHUP reloads the
// configuration (r) and serving goes on: no session is touched.
func serve(srv *daemon.Server, o *options, log *slog.Logger, tcp tcpListener, ml metricsListener, apiSock *net.UnixListener, r *reloader) bool {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, 4)
	stopMetrics := serveMetrics(ml, *o.metrics.cert != "", log, served)
	go func() { served <- srv.Serve() }()
	apiSrv, err := o.api.serve(srv.Leases(), o.group, log, tcp, apiSock, served)
	if err != nil {
		log.Error("lease API", "error", err)
	}
	if err == nil {
		notify(log, sdReady)
		waitForStop(sigs, served, r, log)
	}
	notify(log, sdStopping)
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

// waitForStop reloads on every SIGHUP until a stop signal or a server's
// failure.
func waitForStop(sigs <-chan os.Signal, served <-chan error, r *reloader, log *slog.Logger) {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				notify(log, sdReloading)
				r.reload()
				notify(log, sdReady)
				continue
			}
			log.Info("shutting down: killing every session", "signal", sig.String())
		case err := <-served:
			log.Error("serve failed", "error", err)
		}
		return
	}
}

// fatal reports an error that stops klockd before it serves.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "klockd:", err)
	os.Exit(1)
}
