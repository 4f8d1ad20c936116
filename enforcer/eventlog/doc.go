// Package eventlog owns klock's event stream: the versioned record of one
// decision that matters to a security team (session start and end, scope
// violation, a declared operation klock's wall refused, kill, rollback
// step, lease grant, wait, die and revoke, approval asked and given,
// budget refusal, DNS refusal, and on request every observed triple), its
// published JSON Schema (Schema, `klock schema events`), the Hub that fans
// records out to readers, and the size-rotated file a log shipper tails
// (File).
//
// Records flow one way: a session (enforcer/session), klockd's lease store
// (Leases) and the tool gateways Publish to a Sink; readers (klock events
// through klockd's socket, the events file) take them from a Hub. A reader
// never slows the publisher: Publish copies the record into each reader's
// bounded ring under one short lock and returns. A reader whose ring is
// full loses records: the ring's last slot becomes a KindLost record that
// counts them, delivered in the place of the gap, so the reader is told
// how many it missed and where.
//
// It never decides, kills or rolls anything back. It does I/O only in
// File.
//
// Error semantics: Reader.Next returns ErrClosed once its hub or the
// reader is closed and its ring is drained, or ctx's error. File returns
// the failing step (open, write, rotate) wrapped with %w; a write error is
// also counted and the record dropped (File.Run goes on: the next record
// may succeed after a rotation). ParseSince returns ErrBadSince for a
// value that is neither a duration nor a time.
package eventlog
