// Package runout is what klock run prints and exits with, shared by the
// klock front (a session klockd serves) and the full CLI (every other
// run): the exit statuses, the permissive-mode warning, the agent's
// environment. It links nothing heavier than the standard library, so the
// front stays small.
package runout

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/klocklabs/klock/internal/termsafe"
)

// Exit statuses of klock run beyond the agent's own.
const (
	ExitViolation   = 113 // strict mode killed the session for a scope violation
	ExitInterrupted = 130 // the session was ended from outside (128+SIGINT, as a shell reports Ctrl-C)
	ExitNoStart     = 125 // klock refused or failed to start the session
	ExitWallRefused = 114 // klock's wall refused an operation the manifest declares (verdict REFUSED)
	// ExitLeaseConflict is EX_TEMPFAIL (sysexits.h): another session holds
	// a lease this one needs; trying again later (or --wait) may succeed.
	ExitLeaseConflict = 75
)

// PermissiveNotice is KLIS-6 §3.2's warning: permissive mode logs and
// amends instead of stopping the agent, so it defeats what a declared
// scope is for.
const PermissiveNotice = "klock: WARNING: permissive mode: scope violations are logged and the scope amended, not stopped. " +
	"It is for development and learning (--learn) and must not be used in production (KLIS-6 §3.2); run strict there."

// Outcome is what klock run decides its exit by: a session's result.
type Outcome struct {
	Killed, Interrupted bool
	Reason              string
	// Violation is the violation's text ("" when none).
	Violation string
	// Refused are the declared operations the wall refused: their
	// triples, and the intents that declare them.
	Refused []Refusal
	// AgentExit is the agent's exit status (128+N for signal N) and
	// AgentExitText its wording ("exit status 1", "killed by SIGKILL").
	AgentExit     int
	AgentExitText string
}

// Refusal is one declared operation the wall refused.
type Refusal struct{ Triple, AllowedBy string }

// Exit is klock run's exit status and message for a session that ran: the
// agent's own status; ExitViolation when strict mode killed it (a
// violation, or what it could not verify: lost events, an unobservable
// operation); ExitInterrupted when it was ended from outside (Ctrl-C,
// SIGTERM, klock kill), which automation must not read as a violation;
// ExitWallRefused when the wall refused what the manifest declares. The
// message is "" when there is nothing to say; it names what the agent
// touched, so it is made printable.
func Exit(o Outcome) (int, error) {
	switch {
	case o.Killed && o.Interrupted:
		return ExitInterrupted, errors.New(termsafe.String(o.Reason))
	case o.Killed:
		msg := o.Reason
		if o.Violation != "" {
			msg = o.Violation
		}
		return ExitViolation, errors.New(termsafe.String(msg))
	case len(o.Refused) > 0:
		r := o.Refused[0]
		return ExitWallRefused, fmt.Errorf("klock's wall refused %d operation(s) the manifest declares, first %s (declared by %s); the agent's own exit: %s",
			len(o.Refused), termsafe.String(r.Triple), termsafe.String(r.AllowedBy), o.AgentExitText)
	}
	return o.AgentExit, errors.New("")
}

// KeptOnInterrupt says, for a session ended from outside and not rolled
// back (permissive mode without --rollback-on-interrupt), that the agent's
// work stayed and how to undo it; "" otherwise.
func KeptOnInterrupt(o Outcome, permissive, rollbackOnInterrupt bool) string {
	if !o.Killed || !o.Interrupted || !permissive || rollbackOnInterrupt {
		return ""
	}
	return "interrupted: the agent's work is kept (permissive mode; --rollback-on-interrupt restores at once). To undo it:"
}

// AgentEnv is the environment the agent gets: a small, predictable one,
// not klock's (which may hold the operator's secrets), plus what --env
// names.
func AgentEnv(extra []string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	for _, k := range []string{"TERM", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// --env: later entries win, as the kernel passes them and the C
	// library's getenv reads the first, so a replaced key is dropped.
	for _, kv := range extra {
		k, _, hasValue := strings.Cut(kv, "=")
		if !hasValue {
			v, ok := os.LookupEnv(k)
			if !ok {
				continue
			}
			kv = k + "=" + v
		}
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env
}
