package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/runout"
	"github.com/klocklabs/klock/internal/termsafe"
	"github.com/klocklabs/klock/policy"
	"github.com/spf13/cobra"
)

// Exit statuses of klock run beyond the agent's own (internal/runout).
const (
	exitViolation     = runout.ExitViolation
	exitInterrupted   = runout.ExitInterrupted
	exitNoStart       = runout.ExitNoStart
	exitWallRefused   = runout.ExitWallRefused
	exitLeaseConflict = runout.ExitLeaseConflict
)

// runOptions are klock run's flags; run is the command.
type runOptions struct {
	runout.Flags
	learn    string
	record   string
	noDaemon bool
	tf       trustFlags
	gw       gatewayBinding
	events   eventsFile
}

func newRun() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run -m MANIFEST [flags] -- CMD [ARGS...]",
		Short: "Run an agent under its manifest: block what was not declared, log what happened",
		Long: `Run launches CMD as the first process of a new session: born in its own
cgroup, in new mount, pid and cgroup namespaces (and an empty network
namespace when the manifest declares no NET intent), without capabilities,
with no_new_privs, as a non-root user, behind a Landlock wall compiled from
the manifest and a seccomp filter. Raw syscall tracepoints observe every
file, exec and network operation; cgroup programs wall the network.

Host names follow DNS: when a NET intent names a host (api.example.com, or
a *.example.com wildcard) and the network is walled, the session gets its
own DNS proxy (127.77.x.y:53), the only name server the agent's
/etc/resolv.conf names and the only one it may reach. It forwards the
declared names to the system's resolvers and opens each answer's addresses
to the intent's ports for the answer's TTL plus 30s, so a host whose
addresses change (a CDN) stays reachable. Every other name is refused and
never forwarded (no data leaves in the names asked for): a violation, as
CONSUMES NET:<name>:53/udp (or /tcp). The proxy asks upstream in a query
of its own (nothing of the agent's but the name leaves) and withholds an
answer's loopback, private, link-local and metadata addresses unless the
manifest declares them (a violation, as CONSUMES NET:<address>:<port>).
--learn writes hosts by the names the agent asked for, not the addresses
they answered.

strict      a violation kills the whole session (cgroup.kill) and prints the
            ScopeViolationError; files are restored from the pre-flight backup
permissive  a violation is logged and the scope amended so the session goes
            on; --learn writes the manifest that would have allowed the run.
            It prints once that it must not be used in production (KLIS-6),
            even with -q.

A manifest signed with klock sign is checked before anything starts: one
changed since it was signed is refused, naming the signing key and the
fields that differ. --require-signed also refuses an unsigned manifest and
one signed by a key that is not trusted (trusted keys: /etc/klock/trust/*.pub
and --trust KEY.pub). klockd applies its own --require-signed to the
sessions it runs.

An interrupt (Ctrl-C, SIGTERM, SIGHUP, klock kill) kills the session and
exits 130. In strict mode the files are then restored from the pre-flight
backup, as after a violation. In permissive mode the agent's work is kept
(a learning run's output is what you wanted to see); klock prints the
klock rollback command that undoes it, and --rollback-on-interrupt
restores at once instead.

klock run uses the klockd daemon when it is running (its socket is
$KLOCK_SOCKET, else /run/klock/klockd.sock): the BPF programs stay loaded
and a session starts faster. Otherwise the enforcer runs embedded.

The file wall is bpf-lsm when this kernel can load BPF LSM programs (klock
doctor says whether it can): every file operation is decided in the kernel
before its effect. Elsewhere it is Landlock, with tracepoints detecting
what Landlock cannot express (killed and rolled back in strict mode).
--backend forces one; the verification log always says which ran.

A Landlock wall cannot be widened while the agent runs, so in permissive
mode a refused file operation stays refused there and most programs stop
at the first one: --learn then sees only the start of the run. For a
learning run on such a host, --backend observe puts no file or network
wall up (seccomp and the other namespaces stay): every file, exec and
network operation goes ahead and is recorded, and --learn writes what the
whole run needed, the hosts it reached included. It is refused in strict
mode.

--learn FILE writes the manifest that would have allowed the run, for the
next run: what the run needed on files it made itself (names it chose,
such as git's objects or go test's /tmp/go-build<N>) is declared on the
directory that was there before it, each with a comment saying why. When
FILE exists, the runs are merged (both runs' intents, each once). A
learning run prints a short summary; the detail is in klock log -v.

The verification log goes to <workdir>/.klock/sessions/<id>/verification.json
and its summary to stderr; klock log <id> shows it again.

The agent's environment is small and predictable, not klock's (which may
hold the operator's secrets): PATH, LANG=C.UTF-8, TERM and TZ. --env adds
more (HOME, a proxy, a token the agent needs), one KEY=VALUE per flag.

The agent's /tmp and /var/tmp are its session's own (the manifest's tmp:
private, the default), empty at the start: intents there (${tmpdir}/**)
take no lease and no backup, so agents that all scratch in /tmp run side
by side, and a file in the host's /tmp is out of the agent's reach. They
are removed at the end unless --keep-tmp. tmp: host gives the agent the
host's /tmp (a socket or a file shared with another process).

Before anything is backed up or started, the session takes a lease on
what each of its intents names (KLIS leases: the manifest's and the
baseline's, in the lease store the host's sessions share). Sessions
whose leases do not conflict run side by side, in one workdir too: a
coder writing src/** beside another writing docs/**, two reviewers
reading the same tree. When another session
holds a conflicting lease (by KLIS-2's matrix: two writers of one file,
a writer and a reader, two that create files in one directory), klock
run exits 75 and names it: the lease, its session and agent, and the
intent of this manifest it conflicts with. --wait DURATION keeps trying
(with backoff, keeping its place as the older requester) and says whom
it waits for, until granted or DURATION is over. The leases are
heartbeated while the session runs and released when it ends; klock kill
SESSION revokes them, and a session whose leases are revoked (or expire)
is ended as if interrupted: killed, rolled back in strict mode, and its
log says why. A strict kill rolls back only what no other session's
lease covered while it ran: their files stay as they are, and the log
lists each path it left and whose lease it is.

The session ends when CMD exits. CMD is pid 1 of its own pid namespace,
so whatever it left running in the background ends with it, as in a
container: an agent whose children must finish waits for them (sh -c
'...; wait').

The agent runs as the owner of workdir, else the user who ran sudo; --user 0
is needed to run it as root.

Exit status: the agent's own (128+N when signal N ended it);
113 strict mode killed the session (a violation, or what it could not
verify: lost events, an unobservable operation); 114 klock's wall refused
an operation the manifest declares (verdict REFUSED: klock's failure, not
the agent's; the log lists them); 130 the session was ended
from outside (Ctrl-C, SIGTERM, SIGHUP, klock kill, its leases revoked); 75
another session holds a lease this one needs (nothing was started: try
again later, or --wait); 125 klock refused or failed to
start the session (the message says why and what would fix it).

--gateway SOCKET binds the session to the tool gateway (klock mcp or klock
tools serve) that served its tool calls: when strict mode kills the session,
klock asks that gateway to run the declared rollback of each REVERSIBLE-WRITE
call of the run --gateway-run names (the gateway's --run-id; default the
session id), as klock tools rollback --run does.`,
		Example: `  sudo klock run -m agent.yaml -- ./agent.sh
  sudo klock run -m agent.yaml --wait 10m -- ./agent.sh
  sudo klock run -m agent.yaml --mode permissive --learn learned.yaml -- make build
  sudo klock run -m agent.yaml --mode permissive --backend observe --learn learned.yaml -- go build ./...`,
		Args: cobra.MinimumNArgs(1),
		RunE: o.run,
	}
	o.Register(c.Flags(), session.PrivateTmpRoot)
	c.Flags().StringVar(&o.learn, "learn", "", "permissive mode: write the manifest that would have allowed the run to this file (merged with what it holds when it exists); prints a short summary, the detail is in klock log -v")
	c.Flags().StringVar(&o.record, "record", "counted", "how allowed operations are recorded: counted (reads below the workdir, when one intent allows them all, are counted in the kernel and logged as a number) or all (each operation on its own; --learn implies it)")
	c.Flags().BoolVar(&o.noDaemon, "no-daemon", false, "run the enforcer embedded even when klockd is running")
	o.tf.register(c)
	o.gw.register(c)
	o.events.register(c, "an embedded session's (through klockd they are klockd's: klock events, klockd --events-file)")
	_ = c.MarkFlagRequired("manifest")
	return c
}

// run runs the agent under its manifest (the command's help says how),
// then reports the session and exits as the help's exit status list says.
func (o *runOptions) run(cmd *cobra.Command, args []string) error {
	m, data, err := o.tf.load(o.Manifest)
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	permissive, be, err := o.checkMode(m)
	if err != nil {
		return err
	}
	cred, err := credential(o.User, m.Workdir)
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	if permissive {
		// Even with -q: it is the one warning that must be seen.
		warnPermissive(os.Stderr)
	}
	// A closed terminal (SIGHUP) ends the session as Ctrl-C does:
	// killed, rolled back in strict mode (kept in permissive mode
	// unless --rollback-on-interrupt), logged.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A learning run's amendments are what it learns: they are in
	// the log and the learned manifest, not on the terminal; -q
	// leaves errors only.
	var logger *slog.Logger
	if o.Quiet || o.learn != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	opts := session.Options{
		Logger:   logger,
		Manifest: m, ManifestPath: o.Manifest, ManifestData: data, Mode: policy.Mode(o.Mode),
		Command: args, Env: agentEnv(o.Env), User: cred, LogDir: o.LogDir,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, AllowDegraded: o.AllowDegraded, Backend: be,
		Snapshot: session.Backup(os.Stderr), RollbackOnInterrupt: o.RollbackOnInterrupt, KeepTmp: o.KeepTmp,
		LeaseWait: o.Wait, LeaseTTL: o.LeaseTTL, LeaseGrace: o.LeaseGrace, LeaseGroup: o.gw.leaseGroup(),
	}
	res, err := o.start(ctx, opts)
	if err != nil && res == nil {
		if ctx.Err() != nil {
			// Ctrl-C or SIGTERM while the session was being set up
			// (waiting for leases, taking the backup): an
			// interruption, as after the start; nothing ran.
			return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted before the agent started (nothing ran): %w", err)}
		}
		if errors.Is(err, session.ErrLeaseConflict) {
			return &exitError{code: exitLeaseConflict, err: errors.New(termsafe.String(err.Error()))}
		}
		return &exitError{code: exitNoStart, err: err}
	}
	return o.report(res, err, m, permissive)
}

// checkMode checks --mode, --learn and --backend against each other and the
// manifest: --learn and --backend observe need permissive mode, the one
// because strict mode stops at the first violation, the other because it
// puts no file wall up.
func (o *runOptions) checkMode(m *policy.Manifest) (permissive bool, be session.Backend, err error) {
	if o.Mode != "" && o.Mode != string(policy.ModeStrict) && o.Mode != string(policy.ModePermissive) {
		return false, be, &exitError{code: exitUsage, err: fmt.Errorf("--mode %q: want strict or permissive", o.Mode)}
	}
	permissive = policy.Mode(o.Mode) == policy.ModePermissive || (o.Mode == "" && m.Mode == policy.ModePermissive)
	if o.learn != "" && !permissive {
		return false, be, &exitError{code: exitUsage, err: errors.New("--learn needs permissive mode (--mode permissive): strict mode stops at the first violation")}
	}
	if o.record != "counted" && o.record != "all" {
		return false, be, &exitError{code: exitUsage, err: fmt.Errorf("--record %q: want counted or all", o.record)}
	}
	be, err = session.ParseBackend(o.Backend)
	if err != nil {
		return false, be, &exitError{code: exitUsage, err: fmt.Errorf("--backend: %w", err)}
	}
	if be == session.BackendObserve && !permissive {
		return false, be, &exitError{code: exitUsage, err: errors.New("--backend observe needs permissive mode (--mode permissive): it puts no file wall up, and strict mode promises one")}
	}
	return permissive, be, nil
}

// start runs the session through klockd, which keeps the BPF programs
// loaded, when it runs (and --no-daemon is not given); embedded otherwise.
func (o *runOptions) start(ctx context.Context, opts session.Options) (*session.Result, error) {
	var (
		res  *session.Result
		used bool
		err  error
	)
	if !o.noDaemon {
		res, used, err = daemon.RunViaDaemon(ctx, "", opts)
	}
	if !used {
		// Embedded, the start-up allocates tens of megabytes in
		// a few tens of milliseconds (the kernel's BTF, the BPF
		// objects); collecting them while they are built only
		// takes CPU from the loads on the session's critical
		// path. The collector is back as soon as the agent runs.
		// One err: a := here would leave the session's error in a
		// shadow and hand report a nil result without it.
		var closeEvents func()
		if closeEvents, err = o.events.attach(&opts); err != nil {
			return nil, err
		}
		defer closeEvents()
		restoreGC := pauseGC()
		opts.Started = func(int) { restoreGC() }
		res, err = session.Run(ctx, opts)
		restoreGC()
	}
	return res, err
}

// report prints the verification summary of a session that ran (not for
// -q or a learning run), asks the gateway to roll back a killed run's
// calls, writes the learned manifest, says how to undo work kept after an
// interrupt, and returns klock run's exit (runExit).
func (o *runOptions) report(res *session.Result, err error, m *policy.Manifest, permissive bool) error {
	if res.Log != nil && !o.Quiet && o.learn == "" {
		fmt.Fprintln(os.Stderr)
		_ = vlog.Render(os.Stderr, res.Log, vlog.RenderOptions{})
		fmt.Fprintf(os.Stderr, "verification log: %s\n", res.LogPath)
	}
	if err != nil {
		return &exitError{code: exitNoStart, err: err}
	}
	o.gw.killed(os.Stderr, res, permissive)
	if o.learn != "" {
		if err := writeLearned(os.Stderr, o.learn, m, o.Manifest, res, o.Quiet); err != nil {
			return &exitError{code: exitNoStart, err: err}
		}
	}
	if kept := keptOnInterrupt(res, permissive, o.RollbackOnInterrupt); kept != "" {
		fmt.Fprintf(os.Stderr, "%s\n  klock rollback -m %s %s\n", kept, o.Manifest, res.ID)
	}
	return runExit(res)
}

func credential(user, workdir string) (*launch.Credential, error) {
	if user == "" {
		return launch.DefaultUser(workdir)
	}
	uid, err := strconv.ParseUint(user, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--user %q: want a numeric uid", user)
	}
	return &launch.Credential{UID: uint32(uid), GID: uint32(uid), AllowRoot: uid == 0}, nil
}

// agentEnv is the environment the agent gets (runout.AgentEnv).
func agentEnv(extra []string) []string { return runout.AgentEnv(extra) }

// pauseGC turns the garbage collector off until the returned function is
// called (once is enough; later calls do nothing), except that it still
// runs if the heap reaches startupHeapLimit (or a lower GOMEMLIMIT), so a start-up that allocates
// more than expected is bounded all the same.
func pauseGC() (restore func()) {
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(-1) // reads it
	if limit > startupHeapLimit {
		debug.SetMemoryLimit(startupHeapLimit)
	}
	return sync.OnceFunc(func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	})
}

// startupHeapLimit bounds the heap while pauseGC holds: about four times
// what an embedded start-up peaks at.
const startupHeapLimit = 256 << 20

// outcome is what klock run decides its exit by (runout.Outcome).
func outcome(res *session.Result) runout.Outcome {
	o := runout.Outcome{Killed: res.Killed, Interrupted: res.Interrupted, Reason: res.Reason,
		AgentExit: res.Exit.ExitCode(), AgentExitText: res.Exit.String()}
	if res.Violation != nil {
		o.Violation = res.Violation.Error()
	}
	if res.Log != nil {
		for _, r := range res.Log.Refused {
			o.Refused = append(o.Refused, runout.Refusal{Triple: r.Triple, AllowedBy: r.AllowedBy})
		}
	}
	return o
}

// keptOnInterrupt is runout.KeptOnInterrupt of res.
func keptOnInterrupt(res *session.Result, permissive, rollbackOnInterrupt bool) string {
	return runout.KeptOnInterrupt(outcome(res), permissive, rollbackOnInterrupt)
}

// runExit is klock run's exit for a session that ran (runout.Exit).
func runExit(res *session.Result) *exitError {
	code, err := runout.Exit(outcome(res))
	return &exitError{code: code, err: err}
}
