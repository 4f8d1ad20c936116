//go:build linux

package snapshot

import (
	"maps"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// indexFileKey names one version of a root's index file: a new index is
// written to a new file renamed over the old one, so another process's
// Take (an embedded klock run) or GC gives it another identity.
type indexFileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// warmIndex keeps each backup root's stat cache (index) in memory between
// the Takes of one process: klockd takes every session's backup, and a
// workdir it has seen then costs no decode of its index, nor a rewrite
// when nothing in it changed. It holds only what the file holds. Either
// way the index is a hint: each of its entries is used only for a file
// whose (dev, ino, size, mtime, ctime) still match (index.lookup), so a
// file changed since is read and backed up again.
type warmIndex struct {
	mu  sync.Mutex
	m   map[string]warmRoot
	max int
}

type warmRoot struct {
	key indexFileKey
	ix  index
}

// indexSeen is the process's warm index.
var indexSeen = &warmIndex{max: 64}

func indexKeyOf(root string) (indexFileKey, bool) {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, indexFile), &st); err != nil {
		return indexFileKey{}, false
	}
	return indexFileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true
}

// load returns root's index, a copy the caller may change: the one in
// memory when the file is still the one it was read from or written as,
// else the file's, remembered.
func (w *warmIndex) load(root string) index {
	key, ok := indexKeyOf(root)
	if !ok {
		return index{}
	}
	w.mu.Lock()
	c, hit := w.m[root]
	w.mu.Unlock()
	if hit && c.key == key {
		return maps.Clone(c.ix)
	}
	ix := loadIndex(root)
	// Remembered only if the file did not change while it was read.
	if again, ok := indexKeyOf(root); ok && again == key {
		w.put(root, key, maps.Clone(ix))
	}
	return ix
}

// stored remembers ix as root's index file, just renamed into place; ix
// is the caller's no longer.
func (w *warmIndex) stored(root string, ix index) {
	if key, ok := indexKeyOf(root); ok {
		w.put(root, key, ix)
	}
}

func (w *warmIndex) put(root string, key indexFileKey, ix index) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m) >= w.max {
		w.m = make(map[string]warmRoot)
	}
	w.m[root] = warmRoot{key: key, ix: ix}
}
