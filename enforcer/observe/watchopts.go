package observe

// WatchOption configures Observer.Watch.
type WatchOption func(*watchOpts)

type watchOpts struct{ ops uint64 }

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
