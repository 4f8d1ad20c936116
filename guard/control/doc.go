// Package control owns the control socket of a running gateway: a unix
// socket (mode 0600, so only its owner and root reach it) speaking small
// JSON over HTTP, through which governance (seed 004 §14) changes the
// gateway while it runs: list tools, disable or enable one, change its
// rate limits (klock tools ...).
//
// Error semantics: the server answers 404 for an undeclared tool and 400
// for bad input, each with {"error": ...}; the client returns those as
// errors wrapping ErrRefused, and ErrUnreachable when no gateway listens.
package control
