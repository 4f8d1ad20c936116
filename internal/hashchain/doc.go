// Package hashchain owns klock's append-only, hash-chained JSON Lines files:
// the tool gateway's audit log and the cost path's receipt log both use it,
// so that one piece of code decides what "the chain verifies" means.
//
// Every line is one JSON object carrying two fields the chain owns:
//
//	"seq":  1, 2, 3, ... (the first line is 1)
//	"prev": hex SHA-256 of the previous line's bytes ("" on the first line)
//
// The caller builds the line (Writer.Append hands it the head to link to);
// the chain checks that the line really links to the head before writing
// it, so a caller cannot fork the chain. Writes are followed by fsync unless
// WithoutSync is given; a torn last line left by a crash is cut off when the
// file is reopened (it was never acknowledged to anyone).
//
// # Errors
//
// Verify returns a *BrokenError (errors.Is ErrBroken) naming the first line
// that does not link, does not parse, or that the caller's check rejects.
// Append returns ErrNotLinked when the built line does not carry the head.
package hashchain
