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
// it, so a caller cannot fork the chain. Append returns once its line is on
// stable storage unless WithoutSync is given; concurrent appenders share
// fsyncs (group commit), and AppendAll writes several lines with one write
// and one fsync. AppendDeferred returns once the line is in the file and
// leaves its fsync to the next durable append, or to the writer within
// DeferredSyncDelay. Since an fsync covers everything written before it, a
// crash can only lose a suffix of the chain, never a line in the middle. A
// torn last line left by a crash is cut off when the file is reopened (it
// was never acknowledged as durable to anyone). After a failed write or
// fsync the writer refuses every later append (ErrFailed): what reached
// the disk is then unknown until Open verifies the file again. A sync that
// has more than a piece of lines to make durable writes them out a piece
// at a time before its fsync (package writeout), so that a writer that
// syncs seldom does not hand the disk megabytes at once.
//
// By default "prev" hashes the whole previous line. WithLinker lets a chain
// hash a part of each line instead (for example only what a line's
// signature covers, so that signatures need not be made in chain order);
// such a chain is verified with VerifyWith and the same linker. No klock
// log uses a linker yet: the receipt log hashes whole lines.
//
// # Errors
//
// Verify returns a *BrokenError (errors.Is ErrBroken) naming the first line
// that does not link, does not parse, or that the caller's check rejects.
// Append returns ErrNotLinked when the built line does not carry the head,
// and an error matching ErrFailed once the writer has failed or is closed.
package hashchain
