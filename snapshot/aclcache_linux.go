package snapshot

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// aclKey names one state of an inode: an ACL change, an xattr change and
// an inode flags change all move its ctime.
type aclKey struct {
	dev, ino uint64
	ctime    unix.Timespec
}

// inodeStateOf is e's inode state.
func inodeStateOf(e *Entry) aclKey {
	return aclKey{dev: e.Dev, ino: e.Ino, ctime: unix.NsecToTimespec(e.Ctime)}
}

// settled says whether an answer read now for an inode whose ctime is
// ctime may be remembered under it: only for a ctime at least a second
// old. A file system's timestamps are coarse (a jiffy), so a change made
// in the same tick as the one we saw would keep its ctime (git's "racily
// clean" index entries, the same rule).
func settled(ctime unix.Timespec) bool {
	return time.Since(time.Unix(ctime.Unix())) > time.Second
}

// inodeCache remembers answers read from the kernel per inode state
// (aclKey): what a backup of a large tree (/usr/bin, a workdir) reads of
// every file, besides its stat, once per file per process rather than
// once per session, for as long as the file's ctime says it is unchanged.
// It is bounded: when full it starts over (the walks that fill it revisit
// the same trees, so the next one refills it). The values are shared:
// never changed once put.
type inodeCache[V any] struct {
	mu  sync.Mutex
	m   map[aclKey]V
	max int
}

// aclCache remembers hasACL's answers.
type aclCache = inodeCache[bool]

// The process's caches (klockd takes every session's backup): ACL
// answers, inode flags (readAttrs), and xattrs (listXattrs).
var (
	aclSeen    = &aclCache{max: 1 << 18}
	attrsSeen  = &inodeCache[*Attrs]{max: 1 << 18}
	xattrsSeen = &inodeCache[map[string][]byte]{max: 1 << 18}
)

func (c *inodeCache[V]) get(k aclKey) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok = c.m[k]
	return v, ok
}

func (c *inodeCache[V]) put(k aclKey, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[aclKey]V)
	}
	c.m[k] = v
}

// attrsOfEntry is readAttrs for e, remembered per inode state: inode
// flags are changed by FS_IOC_SETFLAGS and FS_IOC_FSSETXATTR, which move
// the ctime.
func attrsOfEntry(e *Entry) (*Attrs, error) {
	k := inodeStateOf(e)
	if a, ok := attrsSeen.get(k); ok {
		return a, nil
	}
	a, err := readAttrs(e.Path, e.Type)
	if err == nil && settled(k.ctime) {
		attrsSeen.put(k, a)
	}
	return a, err
}

// xattrsOf is listXattrs for p as st saw it, remembered per inode state:
// setting or removing an xattr moves the ctime.
func xattrsOf(p string, st *unix.Stat_t) (map[string][]byte, error) {
	k := aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}
	if x, ok := xattrsSeen.get(k); ok {
		return x, nil
	}
	x, err := listXattrs(p)
	if err == nil && settled(k.ctime) {
		xattrsSeen.put(k, x)
	}
	return x, err
}
