// Package launch owns the birth of a klock session's first process: it
// launches the agent command so that its very first instruction already runs
// inside the session cgroup, in new mount, pid and cgroup namespaces (and a
// new network namespace when asked), as a non-root uid with no capabilities
// and no_new_privs, behind the Landlock ruleset compiled from the manifest
// and a seccomp filter.
//
// # How
//
// Start runs stage 2 (package stage2) with clone3(CLONE_INTO_CGROUP |
// CLONE_NEWNS | CLONE_NEWPID [| CLONE_NEWNET]): the small klock-stage2
// binary when it is installed beside the running executable, owned by root
// and writable by nobody else (it starts several milliseconds sooner than
// klock), else the current binary re-executed ("/proc/self/exe"). The spec
// travels as JSON over a pipe; stage2.Init (klock-stage2's main, and Init,
// which every binary using Start must call first thing in main, and tests
// in TestMain) recognizes stage 2 by an environment variable naming three
// pipe fds. Stage 2, locked
// to one OS thread: marks fds CLOEXEC, unshares a cgroup namespace rooted
// at the session cgroup, makes every mount private and mounts a fresh
// /proc for the new pid namespace, bind-mounts Spec.Binds (a session's
// private /tmp and /var/tmp: nosuid, nodev; neither side may be a
// symbolic link), sets vm.memfd_noexec=2 for that pid
// namespace, brings up lo in a new network namespace, opens every Landlock
// rule path (as root) and builds the ruleset, sets securebits, drops every
// capability (bounding, ambient, then setgroups/setresgid/setresuid, then
// capset to empty), re-arms the parent-death signal, chdirs, sets
// no_new_privs, enforces the Landlock ruleset, installs the seccomp filter,
// and execs the agent.
//
// With Spec.TrapConnect the filter also traps connect(2) to a listener
// (seccomp user notification) that stage 2 sends klock over a socket pair
// before the release: Process.ConnectListener, which the caller answers
// for as long as the agent runs (enforcer/looprelay's handoff). A kernel
// without the listener gets the filter without the trap, and no listener.
//
// The seccomp filter also refuses the ioctls that change a file's metadata
// (internal/metaioctl) when Spec.DenyMetaIoctls: Landlock does not mediate
// ioctls on files, and the owner needs only a read-only descriptor.
// Sessions set it when the manifest lets the agent change no file, or no
// observer would report the ioctls (MetaIoctlsRefused); otherwise the
// tracepoints report each as MUTATES of the descriptor's file, and bpf-lsm
// decides each in file_ioctl. file_setattr (6.17) fails with ENOSYS, so
// programs fall back to the ioctl.
//
// The agent is pid 1 of its pid namespace (stage 2 becomes it; there is no
// helper init left in the session, so nothing privileged lives beside the
// agent). Consequences: the agent's wait status is the session's, exactly
// (Process.Wait); when the agent ends the kernel kills everything else in
// its pid namespace; orphans are reparented to the agent; and a signal sent
// from outside reaches the agent only if it handles that signal (SIGKILL
// and SIGSTOP always do). Process.Kill uses cgroup.kill and always works.
//
// # Landlock
//
// The ruleset is built for the ABI the kernel reports (ProbeABI), handling
// every file-system right of that ABI, TCP bind/connect ports at ABI >= 4
// and signal/abstract-socket scoping at ABI >= 6; there is no best-effort
// mode: no Landlock is ErrNoLandlock and the agent does not start. The
// predicate-to-rights mapping is in rights.go. Landlock rules are
// path-beneath rules on existing files, so the wall is the nearest
// expressible scope and PlanLandlock returns every difference as a Residual
// (Widened: allowed beyond the declaration, detection must flag it;
// Narrowed: declared but denied; Unmediated: not a Landlock operation at
// all). The cases: "/dir/*" is walled as "/dir/**"; an exact directory is
// walled as its hierarchy; creating, removing or renaming a path is a right
// on its parent directory (every entry there gets it); PROVIDES carries
// WRITE_FILE and TRUNCATE so created files can be filled, so existing files
// in that scope are writable too; a path that does not exist at launch is
// walled at its nearest existing directory when the rule can create it
// (refused with ErrUnexpressible when that directory is "/") and dropped
// (Narrowed) when the rule only reads or writes it; "/proc/self/**" is
// walled as the session's own fresh /proc; the ELF interpreters get
// EXECUTE, so "ld.so BINARY" is a residual; metadata changes (chmod, chown,
// utimes, xattrs) and stat are never Landlock operations. Removing or
// renaming the root of "/dir/**" is granted on its parent only inside the
// workdir (policy.RootRemovable), else Narrowed. With Spec.Binds the plan
// looks at each bind's Src for the paths under its Dst (BoundFS: what the
// agent will see there, a private /tmp that starts empty, not the host's
// /tmp) and names them at Dst; stage 2 opens the rules after the binds are
// mounted, so a rule on /tmp attaches to the private directory's inode.
//
// No rule path holds a symbolic link: a rule opens its path, and through a
// link the agent planted it would wall in whatever the link names. A
// declared path through a link root made is walled at its target
// (TrustedLinks, applied to the ruleset with policy.Ruleset.FollowLinks);
// through any other link it is Narrowed; stage 2 opens every rule path
// with RESOLVE_NO_SYMLINKS, so a link that appears after the plan fails
// the start (ELOOP) rather than being followed.
//
// # Canaries
//
// With Spec.Canaries, stage 2 proves the walls after Release and before
// the agent's exec: it writes, executes and connects to objects no
// declaration covers (canary.go: a tmpfs it mounts on DefaultCanaryDir in
// the agent's mount namespace, CanaryConnect), as the agent, and each
// must be refused. Process.Canaries says what each wall did; a canary
// the wall as planned allows is skipped (Skipped says why). In strict
// mode one let through fails Release with a *StageError (step "canary")
// matching ErrWallNotEnforcing, naming the wall and the kernel, and the
// agent never runs. A container's stage 2 tries the canaries its wall
// names (PlanCanaries, stage2.ContainerWall.Canary) before the
// entrypoint's exec and reports them on a pipe Adopt reads: the adopted
// Process's Canaries are known once CanariesKnown is closed, and
// CanaryError is then the strict refusal, if any. A container with no
// klock code inside (OCI hooks alone) has ProbeCanaries try them from
// outside: a process of klock-stage2's probe mode joins its network
// namespace and cgroup, and reports on a pipe Adopt reads alike.
//
// # Errors
//
// Refusals before anything runs wrap a sentinel: ErrNotRoot, ErrNoLandlock,
// ErrUnexpressible, ErrRootNotExplicit (uid 0 without AllowRoot), ErrNoUser,
// ErrBadSpec. A failure inside stage 2 is a *StageError naming the step
// ("landlock: path /srv/x: no such file or directory"); it matches ErrSetup
// and the errno with errors.Is, and Start has already killed and reaped the
// session when it returns it. A non-zero agent exit is not an error: it is
// Wait's Exit.
//
// The package never decides what is allowed (policy does), never observes
// events (the tracepoint backend does), and never creates or removes the
// session cgroup (enforcer/cgroup does).
package launch
