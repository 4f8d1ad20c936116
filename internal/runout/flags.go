package runout

import (
	"time"

	"github.com/spf13/pflag"
)

// Flags are klock run's flags whose meaning klockd implements: the ones
// the klock front serves itself. Both binaries register them from here,
// so the front and the full CLI read a command line the same way; a flag
// of the full CLI's alone makes the front hand the run over.
type Flags struct {
	Manifest, Mode, User, LogDir, Backend string
	AllowDegraded, Quiet, KeepTmp         bool
	RollbackOnInterrupt                   bool
	Wait, LeaseTTL, LeaseGrace            time.Duration
	Env                                   []string
}

// Register adds the flags to fs. privateTmpRoot is where sessions' private
// /tmp live, for --keep-tmp's help.
func (f *Flags) Register(fs *pflag.FlagSet, privateTmpRoot string) {
	fs.StringVarP(&f.Manifest, "manifest", "m", "", "the agent's manifest (required)")
	fs.StringVar(&f.Mode, "mode", "", "strict or permissive (default: the manifest's mode)")
	fs.StringVar(&f.User, "user", "", "uid to run the agent as (default: owner of workdir, else SUDO_UID; 0 only when explicit)")
	fs.StringVar(&f.LogDir, "log-dir", "", "directory for session logs (default <workdir>/.klock/sessions)")
	fs.StringVar(&f.Backend, "backend", "auto", "file wall: auto (bpf-lsm when it loads, else landlock), bpf-lsm (refuse without it), landlock, or observe (none: record only; permissive mode, for --learn)")
	fs.BoolVar(&f.AllowDegraded, "allow-degraded", false, "run even when a mechanism the mode relies on is unavailable (recorded in the log)")
	fs.BoolVarP(&f.Quiet, "quiet", "q", false, "print neither the verification summary nor warnings (errors only)")
	fs.BoolVar(&f.KeepTmp, "keep-tmp", false, "keep the session's private /tmp and /var/tmp ("+privateTmpRoot+"/<session>/{tmp,vartmp}) after it ends, for inspection (default: removed at its end)")
	fs.BoolVar(&f.RollbackOnInterrupt, "rollback-on-interrupt", false, "permissive mode: restore the pre-flight backup when the session is interrupted (strict mode always does; permissive keeps the agent's work)")
	fs.DurationVar(&f.Wait, "wait", 0, "when another session holds a conflicting lease, keep trying this long (e.g. 30s, 10m) instead of exiting 75 at once")
	// For tests: leases that expire in seconds, not a minute.
	fs.DurationVar(&f.LeaseTTL, "lease-ttl", 0, "the leases' lifetime without a heartbeat (default 60s; heartbeats every third of it)")
	fs.DurationVar(&f.LeaseGrace, "lease-grace", 0, "how long an expired lease still holds (default 15s)")
	_ = fs.MarkHidden("lease-ttl")
	_ = fs.MarkHidden("lease-grace")
	fs.StringArrayVarP(&f.Env, "env", "e", nil, "add KEY=VALUE to the agent's environment (repeatable; KEY alone passes klock's own value), e.g. -e HOME=/srv/repo/.home")
}
