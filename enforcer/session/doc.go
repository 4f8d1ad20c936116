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
// Network namespace: every session but an observe-only one or a
// container's (which keeps its runtime's network) runs in a network
// namespace of its own, made by stage 2 (launch.Spec.NewNetNS). Without a
// NET intent it has only loopback. With NET intents, prepare builds,
// between launch.Spawn and Release (the namespace is
// /proc/<Pending.Pid>/ns/net), the packet wall (enforcer/netwall: veth,
// nftables table, peers from the ruleset's CONSUMES NET rules, host names
// as sets the DNS proxy's answers fill for their TTL + DNSGrace, the
// manifest's network.max_egress_bytes as its quota) and the loopback
// relays (enforcer/looprelay) for declared host loopback peers (one
// address, at most looprelay.MaxPorts ports; wider ones are unreachable
// and the log says so; without an egress budget the agent's connects
// trap to the relay, launch.Spec.TrapConnect, which hands a TCP connect
// to such a peer a socket of the host's, with no copy; the connects it
// answers are reported by the syscall tracepoints under the Landlock
// wall, by the relay itself under bpf-lsm, whose cgroup-net hooks never
// run for them: looprelay.Report, read by the session's loop like any
// wall's events), and starts the session's DNS proxy in the
// namespace; it runs beside cgroup-net, which still decides every connect
// and send first. With NET:raw the agent's group may open ping sockets
// there (net.ipv4.ping_group_range, per namespace) and the wall lets
// their echo requests reach the declared peers' addresses (counted under
// NET:raw); a SOCK_RAW or packet socket still fails with EPERM (the agent
// has no CAP_NET_RAW), and the log says so. A wall that cannot be
// built refuses the session (ErrDegraded) unless AllowDegraded: then the
// namespace has no way out (declared peers unreachable, never open) and the
// log says so. Permissive amendments widen it as they widen cgroup-net.
// The walls of a killed klock's sessions are removed at the next session's
// start (netwall.Sweep with cgroup.Alive). A strict session whose egress
// passes its budget is killed (polled every budgetPoll, at once when the
// loopback relay reaches its share; the reason naming the budget), and
// once more judged when its agent has exited, before the verdict (the
// relay's queue read: looprelay.Settle): an agent that sent past its
// budget and exited at once is killed all the same (budgetAtEnd);
// permissive: the kernel drops the rest, the relay holds it, and the log
// says so.
// The counters (per declared peer: delivered, and sent past the budget;
// what was dropped) go into the verification log (vlog.Network) and,
// live, to Options.Traffic (klockd's ps). Residuals: a server the agent starts is reachable from inside its
// namespace only. IPv6 (netns6.go): the namespace has it when the host
// does (netwall: a /64, NAT66), IPv6 peers and AAAA answers open the
// wall as IPv4 ones; at the start the log names each declared IPv6 peer
// the session cannot reach (the host has IPv6 disabled: with the sysctl
// that fixes it; the host has no route to it: the agent's connect fails
// with ENETUNREACH, as without klock).
//
// DNS: when the ruleset names a host and the network is walled
// (always in a namespace of the session's own), Run chooses the session's
// DNS proxy address (127.77.x.y, from the session id) before anything
// else, writes a resolv.conf naming only it, which stage 2 binds read-only
// over the agent's /etc/resolv.conf (launch.Spec.ResolvConf), and opens
// port 53 to it alone (policy.Ruleset.WithResolvers). The proxy
// (enforcer/dnsproxy) listens on that address, port 53, inside the
// session's network namespace: its sockets are made there (a thread
// moved in by setns) as soon as stage 2 made the namespace, before the
// agent runs (again in a relaunched stage 2's), and it forwards from
// klock's own threads, in the host's namespace. Nothing of it is bound on
// the host: a host resolver on port 53 (0.0.0.0:53 included) is no
// conflict, and only the session's processes reach it (the namespace is
// theirs alone), so every query it serves is the agent's. Each
// answer's addresses join the matched intent's rules (the engine's
// ruleset, policy.Ruleset.WithHostAddrs, and cgroup-net's, through the same
// Update permissive widening uses, serialized with it) before the agent
// reads the answer, until the answer's TTL + DNSGrace (30s); the answers
// are the names --learn writes (decide.Engine.Lookup). A refused name is
// the event CONSUMES NET:<name>:53/<udp or tcp, as the query came> (source
// dns-proxy) to the engine. An answer's address the proxy withheld (DNS
// rebinding: loopback, private, link-local, metadata, the host's or the
// veth pair's; not one the manifest's address intents declare,
// policy.Ruleset.DeclaredPrefixes) is the event CONSUMES
// NET:<address>:<the name's port>/<proto>, the name and why in its
// syscall, to the engine the same way. A proxy that cannot start is
// ErrSetup: never the open port 53. No session runs a proxy on a host
// address: one without a namespace of its own (observe-only, a
// container's) gets none (the agent asks the system's, or its
// container's, name servers).
//
// Leases (KLIS-2..4): after the ruleset is compiled and before anything is
// backed up or started, Run takes a lease on every intent of it that
// leases something (lease.FromIntent: FILE and NET; not PROC, not kernel
// views), all or none, from Options.Leases or the host's store
// (HostLeases: openHostLeases is the one place that names it). Not
// granted at once, it retries for Options.LeaseWait (Wait-Die with
// backoff, keeping its age, progress on the logger), then refuses with a
// *LeaseConflictError (ErrLeaseConflict). Granted, the leases are
// heartbeated every TTL/3; when one is no longer held (revoked: klock
// kill, klock leases revoke, the lease API; or expired) the session is
// ended as an interruption from outside (killed, rolled back in strict
// mode, Result.Interrupted, the log's reason says "leases revoked"): it
// must not run on unprotected. They are released after the rollback and
// the log. So two sessions whose leases do not conflict share a workdir,
// and a strict kill's rollback leaves what other holders' changing FILE
// leases (MUTATES, DELETES, RENAMES, PROVIDES) covered at any time since
// its own were granted (snapshot.Leave; their subtrees held at its start
// are not even backed up): the log lists each path left and whose lease
// it was, and one the agent changed there anyway (a wall wider than the
// declaration) as a rollback failure. When the store cannot say what
// others held, nothing is rolled back and the log says so (klock rollback
// can finish it). The log lists the leases held and the wait.
//
// Private /tmp: a session whose manifest says tmp: private (the default;
// policy.Manifest.PrivateTmp) gets a /tmp and a /var/tmp of its own:
// Run makes PrivateTmpRoot/<id>/{tmp,vartmp} (the parent root's, 0700;
// the leaves the agent's, sticky 0777, the mode programs expect of /tmp)
// and stage 2 bind-mounts them over the agent's (launch.Spec.Binds)
// before the Landlock rules are opened. The engine, the observer (whose
// kernel walks cross the bind mount to the agent's /tmp), bpf-lsm and the
// wall name those paths as the agent does (/tmp/x); the intents there
// take no lease (the leases are the manifest's without them: withoutTmp),
// the backup excludes the host's /tmp and /var/tmp (Preflight.PrivateTmp),
// a rollback drops its roots there and empties the private directories
// instead (they started empty), and a permissive amendment there is
// granted without a lease (privateTmpGate). They are removed when Run
// returns unless Options.KeepTmp (klock run --keep-tmp); a klock killed
// with kill -9 leaves them. The log's "private /tmp" backend names the
// host paths. tmp: host, a workdir or start directory in the host's /tmp
// or /var/tmp, and a container's session (its runtime gave it a /tmp of
// its own; klock mounts nothing in a container) keep the host's view.
// The observer resolves the agent's path strings, and maps a metadata
// change's filesystem path, in the agent's mount namespace (stage 2's,
// handed over as soon as stage 2 exists: observe.Watch.InRoot), also
// once the process that made it has exited: a change in the private /tmp
// is named /tmp/..., never at its host path.
// klock sets no $XDG_RUNTIME_DIR: the agent's environment is the
// caller's (Options.Env), and one passed there is a host directory,
// declared like any other path.
//
// Containers: with Options.Container the session adopts a
// container its runtime created instead of launching an agent: the
// runtime's cgroup and its init (waiting in the OCI createRuntime hook),
// never deleted by klock. The manifest names paths as the container sees
// them, and so does the kernel (bpf-lsm and the observer's walks stop at
// the task's root; the observer resolves a container's path strings in
// its root, observe.InOwnRoot): the engine, the kernel rules and the
// Landlock wall judge container paths, while the leases, the backup, the
// rollback and the log's place are the host paths the spec's mounts show
// (Container.Mounts; a path only the container has, a tmpfs, is neither
// backed up nor leased). In the runtime mode (klock-runtime) the session
// writes the wall klock-stage2 raises inside the container before the
// entrypoint (Container.WallFile: Landlock planned on the container's
// mounts, or none under bpf-lsm, plus klock run's seccomp filter); in
// hook-only mode nothing of klock runs inside and bpf-lsm arms at the
// first exec. cgroup-net always walls a container (its network namespace
// is its runtime's). The session ends when the container's init exits.
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
// Counted reads (counted.go): with the tracepoint backend, a read the
// engine allowed below the workdir, when one intent allows every path
// below it (decide.Engine.CountFrom), makes the observer's kernel side
// count the next reads there instead of reporting them
// (observe.Watch.CountBelow); the count is taken at the end and at each
// amendment, credited to that intent, and the log lists it under the
// workdir (vlog.Log.Recording "counted"). Only reads of the workdir,
// which a strict kill restores whole, so none is a rollback root of its
// own; writes, creations, deletions, metadata changes and violations are
// reported one by one. Options.RecordAll (klock run --record all,
// --learn) reports every read.
//
// Canaries: a session (not an observe-only one) has stage 2 prove its
// walls before the agent's exec
// (launch.Canaries, canary.go): strict mode refuses to start behind a
// wall that lets its canary through (launch.ErrWallNotEnforcing);
// permissive mode starts, says so at the error level, tells
// Options.NotEnforcing (klockd's ps) and the log (vlog.Log.Canaries, the
// headline). A container's stage 2 tries them after its runtime starts
// it, once the session is running: it reads the wall's canaries
// (launch.PlanCanaries) and reports on a pipe launch.Adopt reads; in
// strict mode it does not exec the entrypoint, and the session ends
// killed, Run returning the result with the *launch.StageError. A
// container in hook-only mode has no stage 2: a probe klock starts tries
// them in its cgroup while its init waits (launch.ProbeCanaries,
// container_probe.go; bpf-lsm decides for the probe through
// lsm.Session.Probe), and in strict mode its init is killed before the
// entrypoint's exec. The
// canaries' events never reach the engine (isCanary).
//
// Errors: refusals before the agent starts wrap ErrDegraded, ErrSetup,
// ErrObserveStrict, ErrLeaseConflict (a *LeaseConflictError) or the
// launcher's sentinels; once the agent has run,
// Run returns a *Result (with the agent's exit, any violation, whether it
// was interrupted, and the log's path) and an error only for failures of
// klock itself.
package session
