// Package session runs one agent session end to end, and is the only place
// the kernel path is wired together: it compiles and resolves the ruleset,
// creates the session cgroup, puts the observation (tracepoints) and
// network (cgroup-net) backends on it, and with a Landlock file wall the
// pathname AF_UNIX wall (cgroup-unix, where the kernel has its hooks; else
// the log says those sockets are detected only), takes the pre-flight snapshot,
// launches the agent under Landlock and seccomp, feeds every kernel event to
// the decision engine, acts on its verdicts (kill the whole cgroup and roll
// back in strict mode, amend the network rules in permissive mode), and
// writes the verification log.
//
// Never fail open: when a backend that the mode relies on cannot be loaded,
// Run refuses to start (ErrDegraded, naming the lost guarantee and the fix)
// unless Options.AllowDegraded says the operator accepts that loss; the
// verification log then records it. BackendObserve (no file wall, record
// only) is a permissive mode's learning run; strict mode refuses it
// (ErrObserveStrict).
//
// The log is on disk before the agent starts: INCOMPLETE (vlog.Log.Begin,
// naming klock's pid) until the real one replaces it at the end, so a
// session whose klock was killed stays on record. A session that never
// started its agent removes it. Failing to write it refuses the session
// (ErrSetup): its end could not be recorded either.
//
// Repeats: opens a backend counted in the kernel instead of reporting again
// are handed over when the agent has exited and count under the verdict
// their first report got (decide.Engine.Repeated); they are never judged
// again against the state the session ended in.
//
// Errors: refusals before the agent starts wrap ErrDegraded, ErrSetup,
// ErrObserveStrict or the launcher's sentinels; once the agent has run,
// Run returns a *Result (with the agent's exit, any violation, whether it
// was interrupted, and the log's path) and an error only for failures of
// klock itself.
package session
