package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/internal/runout"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/spf13/pflag"
)

// runFlags are the flags of klock run the front serves (runout.Flags:
// those whose meaning klockd implements) and the agent's command. A run
// with any other flag (--learn, --no-daemon, the trust, gateway and
// events flags, --help), an observe backend, or an argument the full CLI
// would refuse goes to the full CLI, which owns their checks and
// messages.
type runFlags struct {
	runout.Flags
	argv []string
}

// parseRun reads args as klock run's full CLI would; ok is false when the
// front does not serve them.
func parseRun(args []string) (f *runFlags, ok bool) {
	f = &runFlags{}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(discard{})
	fs.Usage = func() {}
	f.Register(fs, "")
	if fs.Parse(args) != nil {
		return nil, false
	}
	f.argv = fs.Args()
	switch {
	case f.Manifest == "" || len(f.argv) == 0:
		return nil, false
	case f.Mode != "" && f.Mode != "strict" && f.Mode != "permissive":
		return nil, false
	case f.Backend != "auto" && f.Backend != "bpf-lsm" && f.Backend != "landlock":
		return nil, false
	}
	if f.User != "" {
		if _, err := strconv.ParseUint(f.User, 10, 32); err != nil {
			return nil, false
		}
	}
	return f, true
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// request is the run request of f, the manifest's bytes read.
func (f *runFlags) request() (wire.RunRequest, error) {
	data, err := os.ReadFile(f.Manifest)
	if err != nil {
		return wire.RunRequest{}, err
	}
	path, _ := filepath.Abs(f.Manifest)
	logDir := f.LogDir
	if logDir != "" {
		logDir, _ = filepath.Abs(logDir)
	}
	req := wire.RunRequest{
		Manifest: data, ManifestPath: path, Mode: f.Mode, Argv: f.argv, Env: runout.AgentEnv(f.Env),
		AllowDegraded: f.AllowDegraded, Backend: f.Backend, Summary: !f.Quiet, LogDir: logDir,
		RollbackOnInterrupt: f.RollbackOnInterrupt, KeepTmp: f.KeepTmp,
		LeaseWait: f.Wait, LeaseTTL: f.LeaseTTL, LeaseGrace: f.LeaseGrace,
	}
	if f.User == "" {
		req.DefaultUser, req.SudoUID, req.SudoGID = true, os.Getenv("SUDO_UID"), os.Getenv("SUDO_GID")
	} else {
		uid, _ := strconv.ParseUint(f.User, 10, 32)
		req.UID, req.GID, req.AllowRoot = uint32(uid), uint32(uid), uid == 0
	}
	return req, nil
}

// serveRun runs a session through klockd and returns klock run's exit
// status; served is false when the full CLI must run it instead (flags
// the front does not serve, no klockd, an unreadable or invalid manifest:
// the full CLI's own messages say what is wrong).
func serveRun(args []string) (code int, served bool) {
	f, ok := parseRun(args)
	if !ok {
		return 0, false
	}
	req, err := f.request()
	if err != nil {
		return 0, false
	}
	c, err := wire.Dial("")
	if errors.Is(err, wire.ErrNoDaemon) {
		return 0, false
	}
	if err != nil {
		return fail(runout.ExitNoStart, err), true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	s := &frontSession{f: f}
	res, err := wire.Run(ctx, c, req, [3]*os.File{os.Stdin, os.Stdout, os.Stderr}, s.handlers(ctx))
	var we *wire.Error
	switch {
	case errors.As(err, &we) && we.Class == wire.ClassInvalidManifest:
		return 0, false
	case err != nil && ctx.Err() != nil:
		// Ctrl-C or SIGTERM while the session was being set up: an
		// interruption, as after the start; nothing ran.
		return fail(runout.ExitInterrupted, fmt.Errorf("interrupted before the agent started (nothing ran): %w", err)), true
	case errors.As(err, &we) && we.Class == wire.ClassLeaseConflict:
		return fail(runout.ExitLeaseConflict, errors.New(termsafe.String(err.Error()))), true
	case err != nil:
		return fail(runout.ExitNoStart, err), true
	}
	return s.report(res), true
}

// fail prints err as the full CLI does and returns code.
func fail(code int, err error) int {
	if err != nil && err.Error() != "" {
		fmt.Fprintln(os.Stderr, "klock:", err)
	}
	return code
}
