package snapshot

import (
	"time"
)

// Type is the kind of file an Entry records.
type Type string

// The recorded file types.
const (
	TypeFile    Type = "file"
	TypeDir     Type = "dir"
	TypeSymlink Type = "symlink"
	TypeFIFO    Type = "fifo"
	TypeSocket  Type = "socket"
	TypeChar    Type = "char"
	TypeBlock   Type = "block"
)

// Entry is one recorded path: everything Restore needs to bring it back.
// Times are nanoseconds since the Unix epoch. Dev and Ino identify the file
// at Take (they drive the "unchanged" fast path and hard-link groups).
type Entry struct {
	Path   string            `json:"path"`
	Type   Type              `json:"type"`
	Mode   uint32            `json:"mode"` // permission bits with setuid, setgid, sticky (07777)
	UID    uint32            `json:"uid"`
	GID    uint32            `json:"gid"`
	Atime  int64             `json:"atime"`
	Mtime  int64             `json:"mtime"`
	Ctime  int64             `json:"ctime"`
	Size   int64             `json:"size,omitempty"`
	Dev    uint64            `json:"dev"`
	Ino    uint64            `json:"ino"`
	Nlink  uint32            `json:"nlink,omitempty"`
	Rdev   uint64            `json:"rdev,omitempty"`
	Target string            `json:"target,omitempty"` // symlink target
	Hash   string            `json:"hash,omitempty"`   // sha256 of the content (regular files), or of a file with holes its sparse address (doc.go)
	Link   string            `json:"link,omitempty"`   // hard link: the group's first path
	Xattrs map[string][]byte `json:"xattrs,omitempty"` // every extended attribute, values verbatim
	// Attrs are the inode flags of a regular file or directory, where
	// its filesystem keeps them (nil: it does not, or a manifest from
	// before they were recorded: Restore leaves them as they are).
	Attrs *Attrs `json:"attrs,omitempty"`
	// Fixed marks a path the agent's uid could not change (Options.AgentUID):
	// it is recorded without content or xattrs so that Restore knows it
	// was there and leaves it, and its unrecorded entries, alone.
	Fixed bool `json:"fixed,omitempty"`
	// Closed marks a directory the agent could not enter (Fixed too):
	// nothing below it was recorded, and nothing below it is touched. The
	// agent could at most rename it as a whole (from a directory of its
	// own): Restore moves it back, found by its inode.
	Closed bool `json:"closed,omitempty"`
	// Anchor marks the parent directory of a scope that lies outside every
	// scope: creating or removing a scope's root changes its times, so
	// Restore puts its atime and mtime back and touches nothing else.
	Anchor bool `json:"anchor,omitempty"`
	// Meta marks a path outside every scope whose metadata the agent's
	// uid could change (Options.MetaScopes): its own files in /tmp, its
	// home, its other directories. Only its metadata is recorded (mode,
	// owner, times, xattrs, flags), never its content, and Restore puts
	// only that back, on the same inode; nothing is created or removed
	// there.
	Meta bool `json:"meta,omitempty"`
	// Other marks a path in a tree another session held a changing lease
	// on when the backup was taken (Options.Others): recorded so that a
	// file of that session the agent reached (renamed, linked, wrote
	// through another name) can be put back (Reclaim), and so that its
	// inode is known, but left alone by Restore otherwise. Its content is
	// best effort: a file that changed while it was read, or could not be
	// read, has no Hash.
	Other bool `json:"other,omitempty"`
}

// Manifest is the recorded state of one session, stored as
// <root>/<session>/manifest.json.
type Manifest struct {
	Version int       `json:"version"`
	Session string    `json:"session"`
	Created time.Time `json:"created"`
	// Started is when Take began (before it looked at any path): every
	// file made by the session has a birth time after it, every file
	// that existed before it one before it. Zero in manifests from before
	// it was recorded (Created, taken just before the walk, stands in).
	Started time.Time `json:"started,omitempty"`
	Workdir string    `json:"workdir,omitempty"`
	Scopes  []Scope   `json:"scopes"`
	Exclude []string  `json:"exclude,omitempty"`
	// Others are the trees other sessions held a changing lease on when
	// the backup was taken (Options.Others): their paths inside the
	// scopes are recorded as Other entries, and Restore leaves them as
	// it finds them unless told to reclaim one (Reclaim).
	Others []string `json:"others,omitempty"`
	// AgentUID is the uid the session's agent ran as (Options.AgentUID),
	// when recorded.
	AgentUID *uint32 `json:"agent_uid,omitempty"`
	// AgentGIDs are its groups (Options.AgentGIDs): Add backs up more
	// paths as that uid with those groups could change them.
	AgentGIDs []uint32 `json:"agent_gids,omitempty"`
	// Meta are the regions walked for the Meta entries (Options.MetaScopes);
	// MetaCut those whose walk stopped at Options.MetaLimit, or that could
	// not be read: a change there may have no record (Restore with
	// ReportUnrecorded says so, path by path).
	Meta    []Scope  `json:"meta,omitempty"`
	MetaCut []string `json:"meta_cut,omitempty"`
	// Entries are in walk order: anchors first, then each scope in
	// pre-order (a directory before its contents), then the Meta entries.
	// Restore creates in this order and fixes directory metadata in the
	// reverse.
	Entries []Entry `json:"entries"`
}

// manifestVersion 2 added Meta entries and inode flags, 3 Other entries
// and Started. Open reads 1 and 2 too (no Meta or Other entries; flags
// left as they are); a klock that knows only 1 or 2 refuses a 3 rather
// than restore a Meta entry's content it never had, or another session's
// files it would not know to leave.
const (
	manifestVersion    = 3
	oldManifestVersion = 1
	v2ManifestVersion  = 2
)

// takeStart is when Take began: Started, or for an older manifest
// Created (taken before the walk).
func (m *Manifest) takeStart() time.Time {
	if !m.Started.IsZero() {
		return m.Started
	}
	return m.Created
}

// Info summarises one session snapshot (List).
type Info struct {
	Session string    `json:"session"`
	Created time.Time `json:"created"`
	// Started is when Take began (Manifest.Started).
	Started time.Time `json:"started,omitempty"`
	Workdir string    `json:"workdir,omitempty"`
	Entries int       `json:"entries"`
	Files   int       `json:"files"`
	// Bytes is the total size of the recorded regular files (hard links
	// counted once); NewBytes what this session added to the object store.
	Bytes    int64 `json:"bytes"`
	NewBytes int64 `json:"new_bytes"`
}

// Stats says what Take did.
type Stats struct {
	Entries     int           // recorded paths, anchors included
	Files       int           // regular files (hard-link groups counted once)
	Bytes       int64         // their total size
	IndexHits   int           // files whose hash came from the index (a stat, no read)
	Hashed      int           // files read to compute their hash
	Copied      int           // files whose content went into the store
	CopiedBytes int64         // bytes read to copy those (a file's holes are not read)
	Reflinked   int           // of Copied, how many by FICLONE
	Deduped     int           // files whose content the store already had
	MetaEntries int           // Meta entries recorded (metadata only, outside the scopes)
	MetaVisited int           // paths the walk of Options.MetaScopes looked at
	MetaTime    time.Duration // how long that walk took (their inode flags are read after it, with the scopes')
	Others      int           // Other entries recorded (Options.Others)
	OthersBare  int           // of their regular files, how many without content (changing, vanished or unreadable while read)
	Duration    time.Duration // wall time of Take
}
