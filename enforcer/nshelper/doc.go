//go:build linux

// Package nshelper acts inside another process's namespaces through a
// helper process: the running binary re-executed, or a small binary given
// with Binary (klock-stage2: klockd's own package initialisation costs
// several times its whole start), with an environment variable that Init
// (called first in main, through launch.Init) recognizes. Joining a mount or pid namespace needs a thread that shares
// nothing with the others (setns(CLONE_NEWNS) after unshare(CLONE_FS)),
// or a child created after setns(CLONE_NEWPID), which a Go process cannot
// do to itself safely (the thread it would lock could be the main one).
//
// What it does for klock's sessions:
//   - OpenView: the root directory and the mount table of a mount
//     namespace (a container's, after its pivot_root; a klock run agent's,
//     made by its stage 2), for the observer to
//     resolve the path strings and kernel paths of a container process
//     that has exited, when no process of the container is left to show
//     them in /proc;
//   - SetMemfdNoexec: vm.memfd_noexec = 2 in a pid namespace (a
//     container's), so memfds made there can never be executed, as klock
//     run's stage 2 does in its own.
//
// Errors wrap ErrHelper (the helper failed, or the binary's main does not
// call Init: nothing came back) or the system call's error.
package nshelper
