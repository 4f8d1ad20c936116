package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/klocklabs/klock/enforcer/lease"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/toolerr"
)

// MaxOutput bounds a plugin's stdout (its answer).
const MaxOutput = 1 << 20

// Nobody is the user plugins run as.
var Nobody = launch.Credential{UID: 65534, GID: 65534}

// Runner runs plugin calls under klock sessions.
type Runner struct {
	// StateDir holds one scratch workdir per plugin (session logs and
	// pre-flight backups), owned by klock.
	StateDir string
	// Shared, when set, are kernel backends loaded once for every call
	// (else each session loads its own).
	Shared *session.Shared
	// User runs the entry (default Nobody).
	User *launch.Credential
	// Leases, when set, is the store the plugin sessions take their
	// leases from: the gateway's, so that on a fleet host they are the
	// fleet's (nil: the host's, as for any embedded session).
	Leases lease.Store
	Log    *slog.Logger
	// Cost1TCurrency is the currency of seed 004's cost_1t answers
	// (default DefaultCost1TCurrency).
	Cost1TCurrency string
}

// Run runs one call of p.
func (r *Runner) Run(ctx context.Context, p *Plugin, in Input) (*Result, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: %w", gateway.ErrNotDispatched,
			toolerr.New(toolerr.InternalError, "plugin_start", "plugin %s not run: plugins run only under kernel enforcement, which needs root (run the tool gateway as root)", p.Name))
	}
	workdir := filepath.Join(r.StateDir, p.Name)
	if err := os.MkdirAll(workdir, 0o700); err != nil {
		return nil, notStarted(p, err)
	}
	m, data, err := SessionManifest(p, workdir)
	if err != nil {
		return nil, notStarted(p, err)
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		return nil, toolerr.New(toolerr.InvalidArgs, "encode", "the call cannot be encoded for plugin %s: %v", p.Name, err)
	}
	user := r.User
	if user == nil {
		u := Nobody
		user = &u
	}
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stdout := &capped{max: MaxOutput}
	stderr := &tail{max: 4096}
	id := session.NewID(time.Now())
	var holder *lease.Holder
	if h, ok := lease.HolderFromContext(ctx); ok {
		holder = &h // the tool call's: the plugin acts for it
	}
	res, err := session.Run(ctx, session.Options{
		LeaseHolder: holder, Leases: r.Leases,
		Manifest: m, ManifestPath: filepath.Join(p.Dir, ManifestFile), ManifestData: data, ID: id,
		Command: []string{p.EntryPath}, Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, Dir: p.Dir, User: user,
		Stdin: bytes.NewReader(stdin), Stdout: stdout, Stderr: stderr,
		Snapshot: session.Backup(nil), Backends: r.Shared, Logger: log,
		ExecVeto: newShellGuard(p).check,
	})
	if res == nil {
		if err == nil {
			err = errors.New("no result")
		}
		return nil, notStarted(p, err)
	}
	if err != nil {
		// The plugin ran but klock could not write its verification log:
		// its answer is not trusted without the record.
		return nil, toolerr.New(toolerr.InternalError, "plugin_log", "plugin %s ran (session %s) but its session could not be recorded: %v", p.Name, id, err)
	}
	out := &Result{Session: id, LogPath: res.LogPath}
	switch {
	case res.Violation != nil:
		return out, toolerr.New(toolerr.SandboxViolation, "kernel",
			"plugin %s broke its permissions and klock stopped it (session %s): %v; see %s", p.Name, id, res.Violation, res.LogPath)
	case ctx.Err() != nil:
		return out, ctx.Err()
	case res.Killed:
		return out, toolerr.New(toolerr.SandboxViolation, "kernel",
			"klock stopped plugin %s (session %s): %s; see %s", p.Name, id, res.Reason, res.LogPath)
	case stdout.over:
		return out, toolerr.New(toolerr.InternalError, "plugin_output", "plugin %s answered more than %d bytes", p.Name, MaxOutput)
	case res.Exit.Signal != 0 || res.Exit.Code != 0:
		return out, toolerr.New(toolerr.InternalError, "plugin_exit", "plugin %s exited with %s: %s", p.Name, exitText(res.Exit), strings.TrimSpace(stderr.String()))
	}
	ans, err := parseAnswer(stdout.Bytes(), r.Cost1TCurrency)
	if err != nil {
		return out, toolerr.New(toolerr.InternalError, "plugin_answer", "plugin %s: %v", p.Name, err)
	}
	ans.Session, ans.LogPath = id, res.LogPath
	return ans, nil
}

func notStarted(p *Plugin, err error) error {
	return fmt.Errorf("%w: %w", gateway.ErrNotDispatched,
		toolerr.New(toolerr.InternalError, "plugin_start", "plugin %s could not be started under klock: %v", p.Name, err))
}

func exitText(e launch.Exit) string {
	if e.Signal != 0 {
		return "signal " + e.Signal.String()
	}
	return fmt.Sprintf("status %d", e.Code)
}

// capped keeps up to max bytes and notes an overflow.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.over = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

// tail keeps the last max bytes.
type tail struct {
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.buf) }
