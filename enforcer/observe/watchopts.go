package observe

import "os"

// WatchOption configures Observer.Watch.
type WatchOption func(*watchOpts)

type watchOpts struct {
	ops    uint64
	dirs   []knownDir
	inRoot *ownRoot
	helper func() *os.File
}

// Helper names the small binary that opens a mount namespace's root and
// mount table for the Watch (nshelper.Binary): open returns it, opened,
// or nil for the running binary re-executed. It is called each time a
// namespace is first needed, and its file closed after.
func Helper(open func() *os.File) WatchOption {
	return func(o *watchOpts) { o.helper = open }
}

// InOwnRoot says the cgroup's processes have a root of their own (a
// container's, after its pivot_root), in the mount namespace mntns (an
// open /proc/<pid>/ns/mnt of one of them; the caller keeps it open for
// the Watch's life, which keeps that namespace and its mounts alive): the
// path strings they pass are resolved inside /proc/<pid>/root, absolute
// links included (RESOLVE_IN_ROOT), never in the observer's root, where
// the same name is another file; once the process is gone, inside the
// namespace's root. The names reported are the container's, as the
// kernel's own walk (which stops at the task's root) gives them.
//
// init is the container's first process: its view (mounts, root) is the
// container's once a process that did something has exited.
func InOwnRoot(mntns *os.File, init int) WatchOption {
	return func(o *watchOpts) { o.inRoot = &ownRoot{ns: mntns, init: uint32(init)} }
}

// KnownDirs names directories the session's processes start in (its
// working directory): a relative path whose base is one of them resolves
// even after every process that could show it in /proc has exited, which
// a short-lived agent on a loaded machine does before the reader catches
// up. Each is verified by its inode, like every cached directory.
func KnownDirs(dirs ...string) WatchOption {
	return func(o *watchOpts) {
		for _, d := range dirs {
			o.dirs = append(o.dirs, knownDir{name: d, at: d})
		}
	}
}

// KnownDirAs is KnownDirs for a directory the session's processes name
// otherwise than the observer does (a container's working directory, name
// in its root, at host path at in the observer's): a relative path of a
// container process that has exited resolves from it.
func KnownDirAs(name, at string) WatchOption {
	return func(o *watchOpts) { o.dirs = append(o.dirs, knownDir{name: name, at: at}) }
}

// knownDir is a directory named name by the watched processes, whose inode
// the observer finds at at.
type knownDir struct{ name, at string }

// ProcessEvents watches only the process events (exec, fork, exit) that
// delimit the agent's history: for a session whose file, exec and socket
// operations other backends decide and report (bpf-lsm, and cgroup-net
// with netguard.ReportAllowed). Such a Watch needs no syscall tracepoint:
// while only such Watches exist, none is attached.
func ProcessEvents() WatchOption {
	return func(o *watchOpts) {
		for _, op := range []op{opExec, opFork, opExit} {
			o.ops |= 1 << op
		}
	}
}
