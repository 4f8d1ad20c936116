package vlog

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Headline returns the verdict (CLEAN, VIOLATION, AMENDED, KILLED, REFUSED) and its
// qualifiers, e.g. "VIOLATION (blocked, killed, 3 files restored)".
func (l *Log) Headline() (verdict, summary string) {
	if l.Incomplete() {
		return VerdictIncomplete, fmt.Sprintf("INCOMPLETE (no end recorded: the session is still running, or klock (pid %d) was stopped before it ended it; what the agent did is not in this log, and klock rollback -m MANIFEST %s restores the pre-flight state)", l.KlockPID, l.Session)
	}
	t := tallyViolations(l.Violations)
	restored, failed := tallyRollback(l.Rollback)
	verdict, q := l.verdict(t)
	q = append(q, l.qualifiers(verdict, restored, failed)...)
	if len(q) == 0 {
		return verdict, verdict
	}
	return verdict, verdict + " (" + strings.Join(q, ", ") + ")"
}

// violationTally counts a log's violations by what became of them: the
// verdict and its qualifiers are decided from these counts alone.
type violationTally struct {
	blocked, proxied, detected, amended, denied int
	failedErrnos                                []string // the errnos of attempts that failed without effect
}

// tallyViolations counts violations by outcome (amended, blocked and of
// those refused by the DNS proxy, failed without effect, detected after
// it) and those whose amendment another session's lease denied.
func tallyViolations(vs []Violation) violationTally {
	var t violationTally
	for _, v := range vs {
		if v.LeaseDenied() {
			t.denied++
		}
		switch {
		case v.Action == "amended":
			t.amended++
		case v.Blocked:
			t.blocked++
			if v.ByDNSProxy() {
				t.proxied++
			}
		case v.Failed():
			if n := ErrnoName(v.Errno); !slices.Contains(t.failedErrnos, n) {
				t.failedErrnos = append(t.failedErrnos, n)
			}
		default:
			t.detected++
		}
	}
	return t
}

// tallyRollback counts the rollback operations that restored a file and
// those that failed; spared and successfully left files did nothing.
func tallyRollback(ops []RollbackOp) (restored, failed int) {
	for _, r := range ops {
		if r.Action == RollbackSpared || r.Action == RollbackLeft && r.OK {
			continue // nothing was done to it
		}
		if r.OK {
			restored++
		} else {
			failed++
		}
	}
	return restored, failed
}

// verdict decides the log's verdict from its violations and exit, with
// the qualifiers that belong to that verdict.
func (l *Log) verdict(t violationTally) (verdict string, q []string) {
	switch {
	// A permissive session whose amendment another session's lease
	// refused did not get its scope widened: a violation, whatever the
	// mode (and, when it was not blocked, a change in another session's
	// scope).
	case t.blocked+t.detected+len(t.failedErrnos) > 0 && (l.Mode != "permissive" || t.denied > 0) || l.Exit.KilledByKlock && len(l.Violations) > 0:
		verdict = VerdictViolation
		if t.blocked > 0 {
			q = append(q, "blocked")
		}
		if len(t.failedErrnos) > 0 {
			// Attempted, and the kernel failed it for its own reasons
			// (a rename across file systems: EXDEV): no effect to undo.
			q = append(q, "failed in the kernel without effect ("+strings.Join(t.failedErrnos, ", ")+")")
		}
		if t.detected > 0 {
			q = append(q, "detected after the effect")
		}
		if t.denied > 0 {
			q = append(q, plural(t.denied, "amendment")+" denied: another session holds the lease")
		}
	case l.Exit.KilledByKlock:
		verdict = VerdictKilled
		if l.Lost.Total > 0 {
			q = append(q, plural(int(l.Lost.Total), "kernel event")+" lost, fail closed")
		}
	case len(l.Violations) == 0 && len(l.Refused) > 0:
		verdict = VerdictRefused
		q = append(q, fmt.Sprintf("klock's wall refused %s the manifest declares: klock's failure, not the agent's", plural(len(l.Refused), "operation")))
	case len(l.Violations) > 0:
		verdict = VerdictAmended
		q = append(q, plural(len(l.Amendments), "lease"))
		if t.blocked > t.proxied {
			q = append(q, fmt.Sprintf("%d blocked by the kernel", t.blocked-t.proxied))
		}
		if t.proxied > 0 {
			q = append(q, fmt.Sprintf("%d refused by the DNS proxy", t.proxied))
		}
	default:
		verdict = VerdictClean
	}
	return verdict, q
}

// qualifiers are the headline's qualifiers whatever the verdict: the kill,
// the egress budget, klock's refusals, the rollback, lost events and other
// sessions' changes, in that order.
func (l *Log) qualifiers(verdict string, restored, failed int) []string {
	var q []string
	if l.Exit.KilledByKlock {
		if verdict == VerdictViolation {
			q = append(q, "killed")
		}
	}
	if walls := NotEnforcing(l.Canaries); len(walls) > 0 {
		q = append(q, "WALL NOT ENFORCING (canary let through): "+strings.Join(walls, ", "))
	}
	if l.Network != nil && l.Network.Exceeded {
		q = append(q, "egress budget exceeded")
	}
	if verdict != VerdictRefused && len(l.Refused) > 0 {
		q = append(q, fmt.Sprintf("and klock's wall refused %s the manifest declares", plural(len(l.Refused), "operation")))
	}
	if restored > 0 {
		q = append(q, plural(restored, "file")+" restored")
	}
	if failed > 0 {
		q = append(q, fmt.Sprintf("%d ROLLBACK FAILURES", failed))
	}
	if l.Lost.Total > 0 && verdict != VerdictKilled {
		q = append(q, plural(int(l.Lost.Total), "kernel event")+" lost: log incomplete")
	}
	if n := len(l.Intrusions); n > 0 {
		// Not this agent's doing, so not its verdict; but never silent.
		q = append(q, fmt.Sprintf("another session changed %s this one held (put back by its rollback: see below)", plural(n, "file")))
	}
	return q
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Begin makes l the log of a session that has started and not ended, as
// the session writes it first: its headline is INCOMPLETE until Finish.
func (l *Log) Begin(klockPID int) {
	l.End, l.KlockPID = time.Time{}, klockPID
	l.Verdict, l.Summary = l.Headline()
}

// Incomplete reports whether l records no end (Begin): what the agent did
// is not in it, so nothing may be concluded from what it lacks.
func (l *Log) Incomplete() bool { return l.End.IsZero() && l.KlockPID != 0 }
