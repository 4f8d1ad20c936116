// Package stage2 is the session's side of launch: the process that
// package launch clones into the session cgroup and new namespaces, and
// that becomes the agent. Init recognizes it (EnvVar names its three
// pipes), reads the Spec, and, locked to one OS thread: marks fds CLOEXEC,
// unshares a cgroup namespace, makes every mount private, mounts a fresh
// /proc, bind-mounts the session's directories over others (a private
// /tmp and /var/tmp: Spec.Binds), masks directories, sets vm.memfd_noexec, brings up lo, builds the
// Landlock ruleset (paths opened as root), drops every capability and
// changes identity, re-arms the parent-death signal, chdirs, sets
// no_new_privs, enforces Landlock and seccomp (with Spec.NotifyFD, a
// filter that traps connect, whose listener it sends on that socket),
// waits for the parent's release byte, and execs the agent.
//
// It is its own package so that it can be its own small binary
// (cmd/klock-stage2): stage 2 runs once per session, and a binary that
// imports only the standard library and x/sys starts several milliseconds
// sooner than klock, which links cel-go, protobuf and SQLite. Keep it that
// way: nothing here may import klock's policy or any other heavy package
// (go list -deps shows it). launch decides what the wall is; stage 2 only
// enforces the Spec it is sent.
//
// # Errors
//
// Stage 2 reports a failure before exec as JSON on the status pipe ({step,
// msg, errno}; launch turns it into a *StageError) and exits with FailExit.
// When the parent closes the go pipe without the release byte, stage 2
// exits with FailExit and reports nothing: nobody reads the status any
// more. A Spec whose Protocol or Build differ from stage 2's own is
// refused (StepBuild) before anything is set up.
package stage2
