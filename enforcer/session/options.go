package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// Sentinel errors.
var (
	// ErrDegraded: a backend the mode relies on is unavailable and the
	// operator did not pass AllowDegraded.
	ErrDegraded = errors.New("session: enforcement would be degraded")
	// ErrSetup: the session could not be prepared (cgroup, snapshot, names).
	ErrSetup = errors.New("session: setup failed")
	// ErrObserveStrict: BackendObserve was asked for in strict mode, which
	// promises a wall it would not have.
	ErrObserveStrict = errors.New("session: --backend observe needs permissive mode")
)

// Restorer rolls a session's files back to their pre-flight state. The
// snapshot package provides it; Run calls it after a strict kill. When
// only is non-nil, the rollback is limited to the paths at or below those
// roots (see RollbackRoots); nil restores everything the backup holds.
// What leave covers is left as it is (snapshot.Leave): other sessions'
// leases.
type Restorer interface {
	// Restore puts back what only covers (nil: everything), leaving what
	// leave covers except the paths of reclaim (another session's files
	// the agent changed or moved: put back all the same).
	Restore(ctx context.Context, only []snapshot.Scope, leave []snapshot.Region, reclaim Reclaims) ([]vlog.RollbackOp, error)
	// Existed says whether path existed before the agent started: known
	// when the backup covers it.
	Existed(path string) (known, existed bool)
	// OtherNames are the other names path's inode had when the backup
	// was taken (hard links), nil when none are known.
	OtherNames(path string) []string
	// HiddenNames is how many names path's file had, when the backup was
	// taken, that the backup did not find (a hard link from outside its
	// scopes).
	HiddenNames(path string) int
}

// Snapshotter takes the pre-flight backup of what the ruleset lets the
// agent change, before the agent starts.
type Snapshotter func(ctx context.Context, p Preflight) (Restorer, error)

// Preflight is what a Snapshotter backs up for.
type Preflight struct {
	Ruleset *policy.Ruleset
	ID      string // the session's
	// AgentUID is the uid the agent runs as: a rollback spares the new
	// files it cannot have made.
	AgentUID uint32
	// AgentGIDs are its groups (primary first): with AgentUID, what decides
	// which files it could change, and so what the backup holds.
	AgentGIDs []uint32
	// Others are trees other sessions' leases let them change while this
	// one starts: recorded best effort (snapshot.Options.Others), left by
	// the rollback unless this session's agent changed a file there.
	Others []string
	// Scratch, when not nil, are the agent's own temporary places (host
	// paths) whose metadata the backup records, instead of the host's
	// (snapshot.MetaScopesAt): a container's.
	Scratch []string
	// PrivateTmp: the agent's /tmp and /var/tmp are the session's own,
	// which start empty: nothing there is backed up, and the host's are
	// neither recorded nor touched by the rollback.
	PrivateTmp bool
	// Ready, when set, says whether the backup is still wanted: the
	// session starts it before its walls are up, and a session refused
	// meanwhile must leave no backup behind. A Snapshotter calls it once
	// its walk and copies are done, before it stores or commits anything
	// (snapshot.Options.Ready), and gives up on an error.
	Ready func() error
}

// Backend names the mechanism that walls the agent's file operations.
type Backend string

const (
	// BackendAuto uses bpf-lsm when it loads and the ruleset fits it, else
	// Landlock + tracepoints, and says which in the log.
	BackendAuto Backend = "auto"
	// BackendLSM requires bpf-lsm: the session refuses to start without it.
	BackendLSM Backend = "bpf-lsm"
	// BackendLandlock uses Landlock + tracepoints even where bpf-lsm works.
	BackendLandlock Backend = "landlock"
	// BackendObserve puts no file or network wall up: the tracepoints
	// record every file, exec and network operation and nothing refuses
	// one. Permissive mode only (the session refuses it in strict mode,
	// ErrObserveStrict): it is how --learn sees a whole run on a host
	// whose wall cannot be widened while the agent runs (Landlock), where
	// the agent would otherwise stop at its first refused operation, and
	// learns the network it needs (an own network namespace would show
	// only failed lookups). seccomp and the other namespaces stay.
	BackendObserve Backend = "observe"
)

// ParseBackend reads a --backend value.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case "", BackendAuto:
		return BackendAuto, nil
	case BackendLSM, BackendLandlock, BackendObserve:
		return b, nil
	}
	return "", fmt.Errorf("unknown backend %q: want auto, bpf-lsm, landlock or observe", s)
}

// Options describe one session.
type Options struct {
	Manifest     *policy.Manifest
	ManifestPath string
	ManifestData []byte
	// Mode overrides the manifest's mode when set.
	Mode policy.Mode
	// ID is the session id (NewID when empty).
	ID string

	Command []string // argv; Command[0] is looked up in Env's PATH
	Env     []string
	Dir     string // working directory (default: the manifest's workdir)
	User    *launch.Credential
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer

	// Backend chooses the file wall (default BackendAuto).
	Backend Backend
	// AllowDegraded accepts running without a backend the mode relies on.
	AllowDegraded bool
	// Snapshot takes the pre-flight backup; nil means none (strict mode
	// then refuses unless AllowDegraded: it could not roll back).
	Snapshot Snapshotter
	// RollbackOnInterrupt rolls a permissive session back when it is
	// ended from outside (Ctrl-C, SIGTERM, SIGHUP, klock kill). Without it
	// a permissive session keeps what the agent did: an interrupted
	// learning run is not a violation, and its work is what the operator
	// wanted to see (klock rollback undoes it later). A strict session is
	// always rolled back: its promise is that nothing undeclared stays.
	RollbackOnInterrupt bool
	// NoticeDir is where sessions tell each other that one's agent changed
	// a file the other held a lease on (default DefaultNoticeDir).
	NoticeDir string
	// LogDir is where <id>/verification.json goes (default
	// <workdir>/.klock/sessions, or /var/lib/klock/sessions without workdir).
	LogDir string
	// Resolve looks up NET host names (default: the system resolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// DNSUpstreams are the resolvers the session's DNS proxy forwards the
	// declared names to ("10.0.0.53:53"; default: the nameserver lines of
	// /etc/resolv.conf, port 53). Tests point it at a server they run.
	DNSUpstreams []string
	// Backends, when not nil, are kernel backends already loaded (klockd's):
	// the session uses them instead of loading its own, and leaves them
	// loaded. nil loads them for this session only (the embedded path).
	Backends *Shared
	// Started, when set, is called once the agent itself runs (its exec
	// done), with its pid; a cancel before that is a session that never
	// started.
	Started func(pid int)
	// Armed, when set, is called once for a container whose stage 2 waits
	// for the session's release (klock-runtime's state directory has one):
	// its watchers are on and its wall written, so its runtime may go on
	// setting it up (the createRuntime hook returns) while the session
	// finishes preparing; the entrypoint runs only once it has (Started).
	Armed func()
	// NotEnforcing, when set, is told before Started which walls let their
	// canary through (permissive mode: the agent runs without them).
	NotEnforcing func(walls []string)
	// LeaseStall, when set, is told when the lease store stops answering
	// the session's heartbeats (To zero) and when that ends (klockd shows
	// it in klock ps).
	LeaseStall func(vlog.LeaseStall)
	// Logger receives progress and warnings (default slog.Default()).
	Logger *slog.Logger
	// Stage2 is launch.Spec.Stage2: the session launcher binary
	// (cmd/klock-stage2); "" means the one beside the running executable.
	Stage2 string

	// Leases is the lease manager the session takes its leases from (one
	// per intent that leases something, enforcer/lease); nil is the
	// host's (HostLeases), which every session on the host shares.
	Leases lease.Store
	// LeaseWait is how long to keep trying when another session holds a
	// conflicting lease (klock run --wait); zero: one attempt, and
	// ErrLeaseConflict at once.
	LeaseWait time.Duration
	// LeaseTTL and LeaseGrace are the leases' lifetime without a
	// heartbeat and the grace after it (zero: lease.DefaultTTL and
	// lease.DefaultGrace; klock run's hidden --lease-ttl and --lease-grace
	// shorten them for tests). The session heartbeats every LeaseTTL/3.
	LeaseTTL, LeaseGrace time.Duration
	// LeaseTenant is the leases' tenant (default "uid:<klock's uid>";
	// klockd names its client's uid).
	LeaseTenant string
	// LeaseGroup joins the session's holder to a group of its tenant
	// (lease.Holder.Group): the tool calls a gateway makes for this
	// session's agent ("run:<gateway run id>", klock run --gateway-run)
	// then act for it and do not conflict with its leases.
	LeaseGroup string
	// LeaseHolder, when set, is the holder the session takes its leases
	// as, instead of its own: a plugin run for a tool call acts for the
	// call (lease.ContextWithHolder). The owner of that holder releases
	// the leases; the session does not.
	LeaseHolder *lease.Holder

	// Finished, when set for a container's session, is called with the
	// result once its log is written and its leases released, before the
	// kernel backends are taken down (klockd answers the poststop hook
	// then).
	Finished func(*Result)

	// Container, when set, adopts a container its runtime created
	// instead of launching Command (see Container): Command, Env, Dir,
	// User, the stdio and Stage2 are then unused.
	Container *Container

	// Traffic, when set, is called once the session's network wall is up
	// (a session with NET intents in a namespace of its own), with a
	// function that reads the bytes the agent sent and received so far
	// (klockd's ps).
	Traffic func(read func() (out, in uint64))

	// Events, when set, takes the session's event records (package
	// eventlog: start, violations, refusals, DNS refusals, kill, rollback
	// steps, end; observed triples when it WantsObserved). Publish must
	// not block: the session's event loop calls it.
	Events eventlog.Sink

	// ExecVeto, when set, is asked about every exec of the agent's that
	// the scope allowed (a script's is two: the script, then its
	// interpreter), in the order the kernel reported them; a non-empty
	// answer kills the session with it as the reason, as a violation
	// would (strict mode's rollback follows). It runs on the session's
	// event loop: it must not block. guard/plugin's rule that a plugin's
	// shell runs only as its entry's interpreter is one.
	ExecVeto func(ev event.Event) string

	// RecordAll has the tracepoint backend report every allowed operation
	// on its own, as the verification log then lists it (klock run
	// --record all; --learn, which learns from each object). Without it
	// the reads of files below the workdir, when one intent allows them
	// all, are counted in the kernel once one is judged, and the log
	// gives their number (vlog.RecordCounted); every other
	// operation, violations included, is reported one by one either way.
	RecordAll bool

	// KeepTmp keeps the session's private /tmp and /var/tmp (under
	// PrivateTmpRoot) after it ends, for inspection (klock run
	// --keep-tmp); else they are removed at its end.
	KeepTmp bool

	// dns is the session's DNS proxy (Run sets it for prepare), started
	// in the session's network namespace once stage 2 made it.
	dns *dnsScope
	// tl is the session's timeline (Run sets it for prepare).
	tl *timeline
	// privTmp: the session's /tmp and /var/tmp are its own (Run sets it
	// for prepare): the backup leaves the host's alone.
	privTmp bool
	// loads are the kernel backends Run started loading before the
	// session's setup, for prepare to take (loading.claim).
	loads *loading
}

// Result is how a session ended.
type Result struct {
	ID   string
	Exit launch.Exit
	// Killed is true when klock ended the session (strict violation, lost
	// events, unobservable operation).
	Killed bool
	// Violation is the first ScopeViolationError, if any.
	Violation error
	// Reason is why klock killed the session.
	Reason string
	// Interrupted is true when the session was ended from outside: its
	// context ended (Ctrl-C or SIGTERM to klock run, klock kill through
	// klockd) before anything else killed it. Not a violation.
	Interrupted bool
	LogPath     string
	Log         *vlog.Log
	// Learned is the manifest that would have allowed the run.
	Learned []byte
	// Rollback is what the rollback of a killed session cost; nil when
	// none ran.
	Rollback *RollbackStats
}

// RollbackStats are what a session's rollback cost.
type RollbackStats struct {
	// Duration is the whole rollback: the lease check, the restore, the
	// notices, the private /tmp emptied.
	Duration time.Duration
	// Bytes are the sizes of the regular files it restored, recreated or
	// moved back, as they are after it (what it put back, not what it
	// read).
	Bytes int64
}

// noticeDir is NoticeDir or its default.
func (o Options) noticeDir() string {
	if o.NoticeDir != "" {
		return o.NoticeDir
	}
	return DefaultNoticeDir
}
