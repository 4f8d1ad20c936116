// Package control owns the control socket of a running gateway: a unix
// socket (mode 0600, so only its owner and root reach it) speaking small
// JSON over HTTP, through which governance (seed 004 §14) changes the
// gateway while it runs: list tools, disable or enable one, change its
// rate limits (klock tools ...). With WithLedger it also serves the
// gateway's budget ledger to sub-agents' gateways whose grants are
// delegated from its own (ledger.go; Client.Ledger): delegated grants only.
//
// Error semantics: the server answers 404 for an undeclared tool and 400
// for bad input, each with {"error": ...}; the client returns those as
// errors wrapping ErrRefused, and ErrUnreachable when no gateway listens.
// Ledger calls answer 200 with the error and the name of the budget
// sentinel it wraps; LedgerClient returns them wrapping that sentinel (a
// refusal as a *budget.DenyError), ErrNotDelegated for a grant or hold not
// delegated through the socket, and budget.ErrLedger when the socket
// cannot be reached.
package control
