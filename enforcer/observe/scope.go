//go:build linux && (amd64 || arm64)

package observe

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// belowEntry is the directory below which a Watch's reads are counted,
// and the read that started it.
type belowEntry struct {
	rec Record
	dir string
}

// subtree mirrors struct obs_subtree.
type subtree = observeObsSubtree

// Counted is what the kernel counted below the directory CountBelow
// named: N reads of files below Dir since First, none of them reported.
// Rec is the read that started it (reported and judged on its own).
type Counted struct {
	Rec   Record
	Dir   string
	N     uint64
	First time.Time
}

// Countable reports whether rec is a read the kernel could count below a
// directory from now on (CountBelow): a successful read-only open of a
// regular file with one name, named by the kernel's own path.
func Countable(rec Record) bool {
	return rec.scopable && rec.Path == PathKernel && rec.Kind == KindEvent && filepath.IsAbs(rec.Event.Triple.Path)
}

// CountBelow makes the kernel count, instead of report, the reads of
// files below dir (at any depth), which the caller judged to be allowed
// by one rule for every path there, from rec, such a read (Countable)
// below dir, on: a read-only open of a regular file with one name, on the
// mount rec's file is on, by a task with rec's root, whose dentry has dir
// (by inode on that mount) among its ancestors at the open. Any other
// open there, and every other operation, is still reported. It reports
// whether reads are counted from now on (false: rec is no such read, dir
// is not its directory's, or a directory is counted already).
// TakeCounted hands the count over.
func (w *Watch) CountBelow(rec Record, dir string) (bool, error) {
	if !Countable(rec) || !strings.HasPrefix(rec.Event.Triple.Path, dir+"/") {
		return false, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, fmt.Errorf("observe: count below %s: %w", dir, err)
	}
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.closed {
		return false, ErrClosed
	}
	if w.below != nil {
		return w.below.dir == dir, nil
	}
	v := subtree{Mnt: rec.scope.Mnt, Root: rec.scope.Root, Ino: st.Ino}
	if err := w.o.objs.Subtree.Update(w.id, &v, ebpf.UpdateNoExist); err != nil {
		return false, fmt.Errorf("observe: count below %s: %w", dir, err)
	}
	w.below = &belowEntry{rec: rec, dir: dir}
	return true, nil
}

// TakeCounted stops the counting CountBelow started and returns what the
// kernel counted (the entry is taken away with its count atomically, so
// no read is both counted and reported, nor lost); ok is false when
// nothing was counted. Call it after Sync once the agent has exited, and
// whenever the rules the caller judged by change (a read counted after
// that would stand under the old rule).
func (w *Watch) TakeCounted() (c Counted, ok bool, err error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	b := w.below
	if b == nil {
		return Counted{}, false, nil
	}
	w.below = nil
	var v subtree
	if err := w.o.objs.Subtree.LookupAndDelete(w.id, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Counted{}, false, nil
		}
		return Counted{}, false, fmt.Errorf("observe: take the reads counted below %s: %w", b.dir, err)
	}
	if v.Count == 0 {
		return Counted{}, false, nil
	}
	return Counted{Rec: b.rec, Dir: b.dir, N: v.Count, First: w.o.clock(v.First)}, true, nil
}
