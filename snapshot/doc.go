// Package snapshot owns klock's pre-flight backups (KLIS-6 §3.3, §7):
// before the agent runs, Take records every path the agent will be able to
// change; after a violation (or whenever an operator asks), Restore brings
// every one of them back and removes what the session created (Only
// limits it to some roots: what the agent touched, in a shared scope).
//
// # API
//
//	Take(ctx, rs *policy.Ruleset, Options) (*Snapshot, error)
//	Open(root, session string) (*Snapshot, error)
//	(*Snapshot).Restore(ctx, ...RestoreOption) (Report, error)  // Only(roots...) limits it; ReportUnrecorded; Leave(regions...): another holder's, left as found; Reclaim(paths...): put back there anyway; ReclaimName(paths...): moved back only
//	(*Snapshot).Add(ctx, scopes...) ([]Scope, error)  // record more while the session runs (a permissive amendment)
//	List(root string) ([]Info, error)
//	GC(root string, keep int) (GCReport, error)
//	DeclaredScopes(rs) / WallScopes(rs) []Scope
//	MetaScopes(rs, uid) []Scope  // where an agent's own files live outside the wall
//	TerminalProgress(w io.Writer) func(done, total int64)  // nil unless w is a TTY
//
// # What is recorded
//
// A Scope is a region the agent can change: Tree (a path and everything
// below) or exact. Take uses WallScopes(rs) unless Options.Scopes is set:
// the FILE rules carrying MUTATES, DELETES, RENAMES or PROVIDES, widened to
// what the Landlock wall really allows (see enforcer/launch): "/dir/*" and
// an exact directory are whole hierarchies; creating, removing or renaming
// a path is a right on its parent directory's hierarchy; a path that does
// not exist is walled at its nearest existing directory. Rollback must
// cover that difference, because a detected violation there is what it
// exists to undo. DeclaredScopes is the narrow reading.
//
// Every existing path in a scope is recorded with its type, mode
// (07777), uid, gid, atime/mtime/ctime (ns), size, dev/ino, xattrs (every
// namespace the kernel lists), inode flags (regular files and
// directories: FS_IOC_GETFLAGS, and FS_IOC_FSGETXATTR's extended flags and
// project id, where the filesystem has them; read in parallel, an open
// each), symlink target, device number, hard-link group (members name the
// group's first path) and, for regular files, the sha256 of the content
// (of a file with holes, its sparse address: see "Sparse files"). PROVIDES
// scopes are recorded with content too: the wall must grant WRITE_FILE
// there so new files can be filled, so existing files there are writable. The parent of each scope root inside the
// workdir is an "anchor": only its times are restored (creating or
// removing a scope root changes them). <workdir>/.klock and the backup
// root are never recorded nor removed. Manifest.Started is when Take
// began (before it looked at any path; Take returns only once the
// kernel's coarse clock, which stamps new files' birth times, is past it).
//
// Options.Others are the trees other sessions hold a changing lease on
// when the backup is taken (a session used to pass them as Exclude).
// Their part inside the scopes is recorded too, as Other entries
// (metadata, dev/ino, and content where the file holds still while it is
// read: the object store and the stat-cache index are shared, so a file
// another session's backup just hashed costs a stat), best effort: a file
// there that changes while it is read, is replaced or cannot be read has
// no content, one that vanishes or cannot be listed is left out, and
// Take never fails nor retries because of them (Stats.Others,
// Stats.OthersBare). Restore leaves them as it finds them (All too),
// unless Reclaim names them.
//
// With Options.AgentUID, only what that uid (with its groups, without
// capabilities) could change is recorded in full: a path it owns, may
// write, may remove or rename from its directory, or that lies below a
// directory it may move. Any other path is recorded as Fixed (metadata
// only, no content), and a Fixed directory the agent cannot enter is
// Closed: nothing below it is walked. Restore, ChangedSince and Existed
// leave Fixed paths, their new entries and everything below a Closed
// directory alone (a /tmp/** scope holds every user's files: they cost no
// copy and never refuse a session). Restore does not put back the
// metadata of a directory another user owns (/tmp itself): the agent
// could only move its times to "now", by entries it added or removed,
// which are undone one by one.
//
// # Metadata outside the scopes
//
// chmod, chown, utimes, xattrs and inode flags are no Landlock right: the
// agent can change them on every file it owns that it can reach by name,
// inside the wall or not, and the tracepoints see it after the effect.
// With Options.MetaScopes (session.Backup passes MetaScopes: /tmp,
// /var/tmp, /dev/shm, /run/lock, /run/user/<uid>, the agent's home, the
// directories above the workdir it owns, the paths the manifest declares
// outside it), Take also walks those regions, outside the scopes, going
// down only where the agent can search, and records as a Meta entry
// every path whose metadata the uid could change: its own (any metadata),
// and another user's files it may write (utimes to now, user.* xattrs).
// A Meta entry holds metadata only (no content; flags only when the agent
// owns it, as only an owner sets them). The walk looks at most at
// Options.MetaLimit paths (DefaultMetaLimit; BenchmarkMetaWalk: 4-16 µs a
// path on this kind of host, ~420 paths and 2 ms for this host's
// regions); the regions it did not finish, or could not read, are
// Manifest.MetaCut, and the backup is taken all the same.
//
// Restore puts back the mode, owner, xattrs, atime and mtime, and flags
// of a Meta entry it covers whose ctime changed, on the recorded inode
// only (one removed or replaced since is not the agent's doing: it cannot
// create or remove there, and it is reported spared); it creates and
// removes nothing there. ChangedSince lists Meta entries too. Existed
// knows nothing of those regions (a Meta entry says nothing of what else
// existed). With ReportUnrecorded, every tree root of Only (a session
// passes the paths its agent was seen to change as tree roots) that lies
// outside every scope and has no Meta entry is a failed entry
// (ErrUnrecorded) naming the reason: a change the rollback cannot undo is
// said, never silently kept.
//
// Inode flags are put back last, after the rest of a path's metadata: an
// immutable or append-only flag on the path now is lifted first (nothing
// else could change while it is set), and one recorded goes on a
// rewritten file only once its temp is renamed into place (neither could
// be renamed or linked). Only the settable flags are compared and set; a
// filesystem's own (ext4's extents, htree index) stay as they are.
//
// # On disk
//
//	<root>/objects/ab/cdef…   content, one read-only file per sha256, shared by sessions
//	<root>/objects/ab/cdef….sparse1   a file with holes, by its sparse address (below)
//	<root>/index              stat cache: path -> (dev, ino, size, mtime, ctime, object name)
//	<root>/<session>/manifest.json   Manifest (scopes, excludes, entries in walk order; version 2, Open reads 1 too)
//	<root>/<session>/info.json       Info (List reads only this)
//	<root>/<session>/journal         Restore's intent log (JSON lines)
//	<root>/<session>/restored        what each Restore left: path, its state now, the recorded state it brought back (JSON lines; ChangedSince counts those as klock's own)
//
// The default root is <workdir>/.klock/backups. A file whose (dev, ino,
// size, mtime, ctime) matches the index costs one stat: its content is not
// read (like git's index). Entries are indexed only when their ctime is
// older than 50 ms before hashing ended, so a write in the same timestamp
// tick is never hidden. New content is cloned with FICLONE when the
// filesystems allow it (the clone is then read to name it) and otherwise
// copied in one read→sha256→write pass (so the object's name is the hash
// of exactly the bytes stored); it is checked against the source's fstat
// before and after and retried if the file changed. Copies run in
// parallel (Options.Workers). Restore clones an object the same way and
// verifies the clone by reading it.
//
// A process that takes many backups (klockd takes every session's) keeps
// what it read warm: each root's index in memory while the index file is
// the one it read or wrote (not decoded again, and not rewritten when no
// entry changed), and a file's xattrs, inode flags and ACL answer per
// inode state (dev, ino, ctime; only for a ctime over a second old),
// since each of those changes moves the ctime. Every file is still
// stat'ed by every Take, so a file changed since is read and backed up
// again. Options.Ready lets a caller start the walk before it knows the
// backup is wanted: no new object is stored until it says so, and a
// backup it refuses is removed (one with no new objects is committed
// meanwhile, so that nothing is flushed after the answer; a klock
// stopped before it leaves that backup of a session that never ran).
//
// # Sparse files
//
// A file with a hole that spans an aligned 4 KiB block (lseek(2)
// SEEK_HOLE and SEEK_DATA find it) is read, hashed, stored and restored
// by its data extents (SEEK_DATA /
// SEEK_HOLE), never its holes: the object is a sparse file with the same
// bytes and holes (a copy sets the size with ftruncate, so the holes are
// never written), and Restore writes the data extents back into an empty
// file and sets its size, so the restored file has the same holes. A
// 4 GiB file with 1 MB of data costs about 1 MB to back up and restore
// (BenchmarkSparse).
//
// Its name, the sparse address, is the hex sha256 of "klock sparse v1\x00",
// the size (8 bytes, big-endian), then, in order, every 4 KiB block of the
// file (the last one up to the size) that is not all zeros, as its index
// (8 bytes, big-endian) followed by its bytes, with ".sparse1" appended.
// It is safe:
//
//   - The encoding is a function of the bytes alone (a hole and a block of
//     written zeros are the same), and it is parsed back unambiguously:
//     the size comes first and every block but the last is whole, so two
//     different contents never share an encoding, and a collision needs
//     one of sha256.
//   - The ".sparse1" suffix keeps it apart from plain names: a plain file
//     whose bytes happen to be some sparse file's encoding has that sha256
//     as its name, without the suffix. A reader that predates it finds no
//     valid hash and restores nothing from it rather than misreading it.
//   - Restore verifies it as any object: the bytes it reads from the
//     object and writes (data extents, and holes as zeros) must encode to
//     the name, or the entry fails with ErrCorrupt (a temp written from it
//     is not renamed into place; a write in place has begun, as with any
//     object).
//
// A file without holes keeps its plain sha256 name, so existing stores
// are read as before. Which name a file gets depends on its layout, not
// only its bytes: a sparse file rewritten dense (same bytes) no longer
// matches its recorded name, and Restore writes it back sparse.
//
// # Guarantees
//
// Take is atomic and durable: objects and the manifest are written under
// <root>/.tmp-<session>, flushed (syncfs), objects renamed into the store,
// flushed again, and the session directory renamed into place and its
// parent fsynced. On any error (ENOSPC, EACCES, EROFS, a cancelled ctx, a
// file that keeps changing) everything Take made is removed — temp
// directory, objects it added, fanout directories and the root itself if
// Take created them — so the backup root is exactly as before and the
// session can be refused. Take, Restore and GC serialise on an flock of
// the root directory.
//
// Other processes' changes while Take runs (the agent has not started yet;
// a shared scope such as /tmp never stops changing) are taken as they
// land: a file removed after the walk listed it is left out (it was not
// there when the agent started), and one replaced by another file is
// recorded again and copied (up to three times). Only a removed hard-link
// leader whose other names stay in the scope refuses the backup (ErrChanged).
//
// A file is its inode, not its name: no restore removes an inode that
// existed before its session. Before it removes anything, Restore looks
// for recorded inodes (dev, ino, and a birth time before the backup saw
// them: a freed number given to a new file is not the recorded file) at
// names not their own, in what it would remove or replace: each is
// renamed back to its recorded name (MovedBack, ReportEntry.Why "found at
// <name>") when that name is free or holds something Restore would
// replace anyway (moved aside first to a .klock-mv-<session>-<n> name,
// judged like any other path on the next walk), whatever region the name
// lies in, and the scopes are walked again until nothing more moves; a
// renamed directory comes back with its subtree. An extra hard-link name
// of an inode that still has its recorded name is removed; a hard-link
// group whose leader name lost the inode gets it back by a link from
// another of its names. A recorded inode of this session's regions found
// in a region Restore leaves is moved out to its name when it has none,
// and never removed there. What cannot be put back stays where it is,
// reported failed. An unrecorded file or directory Restore would remove
// (or replace) that was born (statx btime, where the filesystem keeps it)
// before Take began and has one link is kept, reported failed with its
// inode: it existed before the session and its old name is unknown. A
// recorded file that is still its recorded inode but was written to gets
// its content back in place (truncate, write, fsync), so the inode, and
// every other name of it, survives; only a running program's file
// (ETXTBSY) or a replaced inode gets a new one (temp + rename).
//
// Reclaim(paths) names recorded paths in a left region (Leave's, or
// Others) that the session's agent changed or reached through another
// name: they are put back anyway (moved back, content when the backup
// has it, metadata), reported with ReportEntry.Holder (the region's Why,
// naming the holder session) and a Why that says it was another
// session's file put back to its state when this session began; one
// without recorded content fails, saying so and what was done.
// ReclaimName(paths) is Reclaim for a file whose name alone the agent
// moved: its inode is moved back, and what it holds then (the holder's
// writes since) is left as found; an inode that cannot come back is
// reclaimed whole.
//
// Restore is idempotent and resumable. It journals its intent (temp names,
// moves back and per-path actions, fsynced) before acting; it removes paths that are
// in a scope but not recorded (and recorded paths whose type changed),
// creates missing directories top-down, writes each file's content into a
// temp next to it (content verified against its hash, owner, xattrs, mode
// and times set, fsync) and renames it over the target, relinks hard-link
// members to their leader, fixes metadata of files whose content is right
// in place, fixes directories' metadata after their contents (deepest
// first), flushes the filesystems, and writes "end". A path whose inode
// and ctime still match the record costs one lstat; one that changed is
// hashed, and rewritten only if the bytes differ. Killed at any point
// (kill -9), running Restore again removes the journalled temps and
// converges to the identical tree; the Report then merges what the killed
// run did (Resumed is true).
//
// # Errors
//
// File-system failures are *Error{Op, Path, Kind, Err, Hint}: errors.Is
// matches the class (ErrNoSpace for ENOSPC/EDQUOT, ErrPermission for
// EACCES/EPERM/EROFS) and the errno; the message names the path and says
// what would fix it. Other sentinels: ErrExists, ErrNotFound (ErrCollected
// when GC removed the session's backup: GC records what it removes in
// collected.jsonl so Open can say so), ErrInvalid,
// ErrCorrupt (a missing or altered object), ErrChanged, ErrIncomplete
// (Restore finished but some paths failed: they are in Report.Failed, and
// running Restore again resumes).
//
// # Not covered
//
//   - Paths outside the scopes are not backed up: the kernel wall blocks
//     writes there. If the integrator walls wider than WallScopes, it must
//     pass its wall as Options.Scopes.
//   - atime is restored only on paths Restore writes and on Meta entries
//     (elsewhere reads move it, Restore's own included); ctime cannot be
//     restored; inode numbers change for files replaced by the agent
//     (a new inode at the name), recreated, or busy (ETXTBSY) when
//     written back. A content write in place is not atomic: killed
//     midway, the file holds part of it until Restore runs again.
//   - Birth times: on a filesystem without them (statx reports no
//     STATX_BTIME) an unrecorded file is judged by its name alone, as
//     before (and a recorded inode by its number). A file made during
//     Take by another process after the walk passed is born after Take
//     began and is removed like the session's own.
//   - A recorded inode moved into a new directory of a left region that
//     Reclaim does not name is not looked for there (its recorded name is
//     made again from the backup; the inode is not removed).
//   - Metadata of an agent-owned file outside the scopes and outside
//     MetaScopes (or past MetaLimit) is not recorded: a change there is
//     reported (ReportUnrecorded), not undone. Restoring with no limit
//     (lost events, --all) puts back every changed Meta entry, whoever
//     changed it (another process of the same uid included). A casefold
//     flag is set on a directory after its contents, which the kernel
//     refuses on a non-empty directory.
//   - A hard link that reaches outside the scopes is not followed; its
//     outside name gets the restored content only when the scoped file
//     is written back in place (it is the same inode).
//   - Other entries are best effort: a file that was changing while the
//     backup was taken has no content to reclaim, and one that vanished
//     or could not be listed has no record (a hard-link member of a
//     content-less Other leader, even in this session's scope, has none
//     either).
//   - Sockets, FIFOs and device nodes are recreated as nodes (mknod), not
//     as live objects; mounts are not recorded; the walk crosses mount
//     points inside a scope.
//   - Holes are kept at 4 KiB granularity: on a filesystem of smaller
//     blocks, a file whose holes are all smaller is a plain file (copied
//     dense), and a copy (not a clone) writes a data extent that starts
//     or ends inside a 4 KiB block as the whole block. Space the
//     filesystem reserved past what was written (xfs's speculative
//     preallocation) is not reserved again; nor is an unwritten
//     (fallocated) extent that SEEK_DATA reports as a hole.
//   - A move of a scoped file to another filesystem is seen as a delete
//     (restored from the store) plus, when the destination is in a scope,
//     a create (removed).
//   - The backup root must be protected from the agent (the enforcer must
//     deny <workdir>/.klock): Restore trusts the manifest, and verifies
//     each object's hash before it writes it.
//   - No progress bar during Restore; Take reports bytes via Options.Progress.
package snapshot
