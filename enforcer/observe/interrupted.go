package observe

import (
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's restart codes (include/linux/errno.h): a syscall that
// waited and was interrupted by a signal leaves with one of them, and the
// syscall tracepoints see that exit. It is not the call's answer: the
// kernel turns it into EINTR for the program or, with SA_RESTART (or
// always, for ERESTARTNOINTR), runs the call again, whose exit carries the
// answer. A connect the session's loopback relay traps (seccomp user
// notification) waits until the relay answers, so any signal in that
// window (Go's preemption signal, SIGCHLD, a timer) gives one.
const (
	errRestartSys          = 512
	errRestartNoIntr       = 513
	errRestartNoHand       = 514
	errRestartRestartBlock = 516
)

// interrupted reports whether a syscall's return value is a restart code.
func interrupted(ret int64) bool {
	switch -ret {
	case errRestartSys, errRestartNoIntr, errRestartNoHand, errRestartRestartBlock:
		return true
	}
	return false
}

// heldMax bounds how long a held call waits for its thread's next record
// before it is sent as it was (EINTR). Longer than any call run again
// waits for its answer in klock's own hands: a connect the loopback relay
// traps waits up to its 10 s connect timeout, and under a slow (emulated)
// CPU the relay's answer took longer than a poll interval, which sent the
// interrupted call as a failed use beside its answer. Only a thread kept
// in its signal handler or stopped waits this long to have its attempt
// reported; Sync sends every held call at the session's end.
const heldMax = 15 * time.Second

// heldCall is the translation of an interrupted call, held until its
// thread's next record says what became of it.
type heldCall struct {
	pid  uint32
	nr   int32
	at   time.Time
	recs []Record
}

// hold keeps recs, the records of r's interrupted call, instead of
// sending them (settleHeld has settled the thread's previous one). Under
// o.mu.
func (w *Watch) hold(r *raw, recs []Record, now time.Time) {
	if w.held == nil {
		w.held = make(map[uint32]*heldCall)
	}
	w.held[r.tid] = &heldCall{pid: r.pid, nr: r.nr, at: now, recs: recs}
}

// settleHeld decides what became of the call r's thread had interrupted,
// before r is delivered: r is that call run again (the same syscall: its
// record is the answer, the interrupted one is dropped), or the thread
// went on to something else (the interrupted call's records are sent as
// they were: the program got EINTR). A whole process's exit sends its
// threads' held calls. Under o.mu.
func (w *Watch) settleHeld(r *raw) {
	if len(w.held) == 0 || w.closed {
		return
	}
	if r.op == opExit {
		for tid, h := range w.held {
			if h.pid == r.pid {
				w.sendHeld(h)
				delete(w.held, tid)
			}
		}
		return
	}
	h := w.held[r.tid]
	if h == nil {
		return
	}
	delete(w.held, r.tid)
	if r.op == opFork || r.nr != h.nr {
		w.sendHeld(h)
	}
}

// flushHeld sends the held calls interrupted before cutoff (every one for
// the zero time): a thread that stays in its signal handler, or is
// stopped, has its attempt reported heldMax after it. Under o.mu.
func (w *Watch) flushHeld(cutoff time.Time) {
	for tid, h := range w.held {
		if cutoff.IsZero() || h.at.Before(cutoff) {
			w.sendHeld(h)
			delete(w.held, tid)
		}
	}
}

// sendHeld sends a held call's records as the call's answer was: EINTR.
func (w *Watch) sendHeld(h *heldCall) {
	for _, rec := range h.recs {
		w.send(rec)
	}
}

// eintr is the errno an interrupted call's record carries.
const eintr = int32(unix.EINTR)
