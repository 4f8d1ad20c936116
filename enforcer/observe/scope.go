//go:build linux && (amd64 || arm64)

package observe

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// scopeEntry is a directory whose reads the kernel counts: the record
// that made it one, and the directory's path.
type scopeEntry struct {
	rec Record
	dir string
}

// Counted is what the kernel counted in one directory CountIn named: N
// reads of files directly in Dir since, none of them reported. Rec is the
// read that made Dir counted (reported and judged on its own).
type Counted struct {
	Rec Record
	Dir string
	N   uint64
}

// Countable reports whether rec is a read the kernel could count by its
// directory from now on (CountIn): a successful read-only open of a
// regular file with one name, named by the kernel's own path.
func Countable(rec Record) bool {
	return rec.scopable && rec.Path == PathKernel && rec.Kind == KindEvent && filepath.IsAbs(rec.Event.Triple.Path)
}

// CountIn makes the kernel count, instead of report, the reads of the
// files directly in rec's directory (filepath.Dir of its path), which
// the caller judged to be allowed by one rule for every name there: a
// read-only open of a regular file with one name, through the same
// directory (dentry, mount and generation), from the same root, with no
// rename since on the machine (the kernel's rename generation). Any
// other open there, and every other operation, is still reported. It
// reports whether the directory is counted from now on (false: rec is no
// such read, or the table is full). TakeCounted hands the counts over.
func (w *Watch) CountIn(rec Record) (bool, error) {
	if !Countable(rec) {
		return false, nil
	}
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.closed {
		return false, ErrClosed
	}
	if _, ok := w.scopes[rec.scope]; ok {
		return true, nil
	}
	var zero uint64
	if err := w.o.objs.Scoped.Update(&rec.scope, &zero, ebpf.UpdateNoExist); err != nil {
		// A full table (E2BIG): the reads there go on being reported.
		return false, nil
	}
	w.scopes[rec.scope] = scopeEntry{rec: rec, dir: filepath.Dir(rec.Event.Triple.Path)}
	return true, nil
}

// TakeCounted stops counting in every directory CountIn named and
// returns what the kernel counted there (each key is taken away with its
// count atomically, so no read is both counted and reported, nor lost).
// Call it after Sync once the agent has exited, and whenever the rules
// the caller judged by change (a read counted after that would stand
// under the old rule).
func (w *Watch) TakeCounted() ([]Counted, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	var out []Counted
	var errs []error
	for k, e := range w.scopes {
		var n uint64
		kk := k
		err := w.o.objs.Scoped.LookupAndDelete(&kk, &n)
		delete(w.scopes, k)
		if err != nil {
			if !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if n > 0 {
			out = append(out, Counted{Rec: e.rec, Dir: e.dir, N: n})
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("observe: take counted reads: %w", errors.Join(errs...))
	}
	return out, nil
}
