package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/internal/runout"
)

// frontSession is a run the front serves: its flags, and its mode once
// klockd says it started.
type frontSession struct {
	f          *runFlags
	permissive bool
}

// handlers print what klockd says before the result: the permissive
// warning (even with -q: it is the one warning that must be seen) and the
// session's progress and warnings (errors only with -q).
func (s *frontSession) handlers(ctx context.Context) wire.RunHandlers {
	var logger *slog.Logger
	if s.f.Quiet {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	return wire.RunHandlers{
		Started: func(info wire.SessionInfo) {
			if info.Mode == "permissive" {
				s.permissive = true
				fmt.Fprintln(os.Stderr, runout.PermissiveNotice)
			}
		},
		Log: wire.LogTo(ctx, logger),
	}
}

// report prints the verification summary of a session that ran (not
// with -q), says how to undo work kept after an interrupt, and returns
// klock run's exit status, as the full CLI does.
func (s *frontSession) report(res *wire.Result) int {
	if res.Summary != "" && !s.f.Quiet {
		fmt.Fprintln(os.Stderr)
		fmt.Fprint(os.Stderr, res.Summary)
		fmt.Fprintf(os.Stderr, "verification log: %s\n", res.LogPath)
	}
	if res.Error != "" {
		return fail(runout.ExitNoStart, errors.New(res.Error))
	}
	o := outcome(res)
	if kept := runout.KeptOnInterrupt(o, s.permissive, s.f.RollbackOnInterrupt); kept != "" {
		fmt.Fprintf(os.Stderr, "%s\n  klock rollback -m %s %s\n", kept, s.f.Manifest, res.ID)
	}
	return fail(runout.Exit(o))
}

// outcome is what klock run decides its exit by, from the wire.
func outcome(res *wire.Result) runout.Outcome {
	o := runout.Outcome{Killed: res.Killed, Interrupted: res.Interrupted, Reason: res.Reason,
		Violation: res.ViolationText, AgentExit: res.ExitCode, AgentExitText: res.ExitText}
	if res.Signal != 0 {
		o.AgentExit = 128 + res.Signal
	}
	for _, r := range res.Refused {
		o.Refused = append(o.Refused, runout.Refusal{Triple: r.Triple, AllowedBy: r.AllowedBy})
	}
	return o
}
