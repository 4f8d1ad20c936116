// Package lsm owns klock's BPF-LSM backend: LSM programs on file_open,
// bprm_check_security and the path_* hooks that decide in the kernel,
// before the effect, for every process of a session's cgroup (io_uring
// operations included: they reach the same hooks).
//
// # Model
//
// Load loads and attaches the programs once (klockd keeps them; the
// embedded path loads them per session). Attach gives a session cgroup its
// rules: compile turns a policy.Ruleset into LPM-trie entries keyed by a
// session id and path bytes, whose values hold the union of every covering
// rule, so the kernel's longest match decides exactly as
// policy.Ruleset.Allows (a property the tests check on random paths).
// CompileRules hands the same entries (Rules) to enforcer/unixguard, whose
// trie has this one's layout (bpf/include/lsm.h, pathrule.h), so a
// pathname socket is decided alike by both. A new
// session is "arming" until the second exec of its first process (klock's
// stage 2 re-executes itself, then execs the agent): the agent's exec is the
// first operation decided; a process Session.Probe names (the canaries
// of a session still arming) is decided meanwhile. Objects are named by the kernel's own path
// (bpf/include/kwalk.h, shared with the tracepoint backend); an object with
// no reachable name is refused. Files the session created (O_CREAT) stay
// the session's to read, change, delete and rename, as enforcer/decide
// allows. Every decision is reported as an event.Event with Source bpf-lsm;
// a refused one has Blocked set and Errno EPERM.
//
// Time and xattr changes reach only inode_* hooks, which name a dentry
// but no mount: the mount is the one the session last reached that file
// system through (else its cwd's or root's); a dentry not below it has no
// name and is refused. An AF_UNIX connect or datagram to a socket file is
// CONSUMES of that file (unix_stream_connect, unix_may_send); a connect to
// an absolute name is also decided by that name in socket_connect, before
// the kernel's lookup, which DAC may refuse first (the attempt is then
// refused with EPERM and reported all the same); to an abstract name it is
// always refused: nothing can declare one. Raw and packet sockets are
// refused unless NET:raw is declared, and reported (socket_create, which
// runs before the family's CAP_NET_RAW check).
//
// A metadata ioctl (bpf/include/metaioctl.h: FS_IOC_SETFLAGS,
// FS_IOC_FSSETXATTR, ..., through a descriptor that may be read-only) is
// MUTATES of the descriptor's file (file_ioctl). An executable mapping of a
// file (mmap_file, file_mprotect with PROT_EXEC: the dynamic loader run
// directly, dlopen, a loader of one's own) runs its code without an exec:
// it is allowed when a PROC rule covers the file or it lies in the
// baseline's library directories where the agent cannot write
// (policy.Ruleset.MapsExec; compile gives those entries LSM_MAPEXEC), and a
// refusal is reported as PROVIDES PROC of the file; allowed mappings are
// not reported. Anonymous executable memory (JITs) names no file and is
// not decided.
//
// Repeats: an allowed operation whose triple is its need on the object
// alone (opens, truncate, chmod, chown, times, xattrs) is cached per
// session by dentry, mount, inode, generation, rules and renames; a repeat
// is allowed and counted without a walk or a report, and Repeats hands the
// counts over at the end.
//
// Not covered here, by design: IP network operations (enforcer/netguard's
// cgroup programs wall them for both backends, and for a bpf-lsm session
// report the allowed ones too). A bpf-lsm session needs no syscall
// tracepoint: the observer only delimits its processes' history.
//
// # Errors
//
// ErrLoad: the programs cannot load or attach on this kernel (klock doctor
// says why). ErrUnsupported (TooLongError): the ruleset has a rule the
// kernel maps cannot hold; the caller picks another backend and says so.
// ErrAttach: a session could not be given its rules. ErrClosed: the backend
// was closed.
package lsm
