// Package netnsdo runs code inside another network namespace from a Go
// program, and brings a namespace's loopback up: what the session (its
// DNS proxy's sockets, ping_group_range), the loopback relay (its
// listeners) and stage 2 (the agent's namespace) each need, written once.
//
// A network namespace belongs to a thread, and the Go scheduler moves
// goroutines between threads: Do locks one thread for f, moves it into
// the namespace, runs f, and moves it back. Sockets f makes stay in the
// namespace; a /proc/sys/net file f opens is the namespace's. A thread
// that cannot be moved back stays locked and ends with its goroutine,
// never reused in the wrong namespace.
//
// Errors: Do returns f's error, joined with the setns failure that kept
// f from running or the thread from coming back (wrapped, with "setns").
// LoopbackUp returns the ioctl's error, naming the step.
package netnsdo
