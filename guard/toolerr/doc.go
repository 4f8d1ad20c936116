// Package toolerr owns the typed result an agent sees when a tool call does
// not succeed: {ok:false, error_class, retryable, message} with the error
// classes of seed 004, and the MISSING sentinel that stands for a tool's null
// output (seed 002: a null must never reach the model as the string "null").
//
// Error semantics: every *Error matches its class's sentinel with errors.Is
// (errors.Is(err, toolerr.ErrInvalidArgs)); wrapping with %w keeps that.
// Nothing here does I/O.
package toolerr
