// Package backlog delivers values on a channel without ever blocking the
// sender: a value that finds the channel full waits, in order, in a
// backlog that a pump goroutine moves into the channel as the reader takes
// them, up to a limit on both together. klock's BPF readers serve every
// session from one ring buffer; each session gets its records through a
// Queue, so a session that lags stalls no other, and one that keeps up
// pays for a small channel only: the slack is allocated when it is used.
// A channel of the whole limit (16,384 observer records, 4,096 netguard
// events) cost every session megabytes, zeroed at its start and scanned by
// every garbage collection while it lived.
//
// Put reports false when the queue holds its limit or has ended: the
// caller counts a loss. End closes the channel behind every value put
// before it, which stay readable as a closed buffered channel's do; a
// reader that takes none for AbandonAfter gets no more, so that the pump
// does not outlive it for long.
package backlog
