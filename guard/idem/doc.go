// Package idem owns the idempotency store: for a tool whose contract has
// idempotency mode key, the first successful result of a key is kept, and a
// later call with the same key gets that result back without reaching the
// tool again (seed 002: "duplicate key returns the original result").
//
// The store is an append-only JSONL file, fsynced per entry and read back
// on open (a torn last line from a crash is dropped), so a restart keeps
// every key. Calls with the same key are serialised by Lock, so two
// concurrent duplicates still make one effect.
//
// Error semantics: Open and Put return ErrStore wrapping the cause; the
// gateway then refuses the call (it could not promise a single effect).
package idem
