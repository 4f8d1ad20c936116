package observe

// WatchOption configures Observer.Watch.
type WatchOption func(*watchOpts)

type watchOpts struct {
	ops  uint64
	dirs []string
}

// KnownDirs names directories the session's processes start in (its
// working directory): a relative path whose base is one of them resolves
// even after every process that could show it in /proc has exited, which
// a short-lived agent on a loaded machine does before the reader catches
// up. Each is verified by its inode, like every cached directory.
func KnownDirs(dirs ...string) WatchOption {
	return func(o *watchOpts) { o.dirs = append(o.dirs, dirs...) }
}

// Residuals watches only what a backend deciding on kernel paths (bpf-lsm)
// does not decide: socket operations (an AF_UNIX path names a file),
// io_uring set-up, 32-bit syscalls, and the process events (exec, fork,
// exit) that delimit the agent's history.
// The kernel drops every other record before it reaches the ring buffer.
func Residuals() WatchOption {
	return func(o *watchOpts) {
		for _, op := range []op{opExec, opConnect, opSendto, opBind, opListen, opSocket, opIOUring, opCompat, opFork, opExit} {
			o.ops |= 1 << op
		}
	}
}
