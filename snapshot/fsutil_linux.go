//go:build linux

package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// testHook, when set (tests only), is called before every operation that
// changes the file system during Restore; the crash test kills the process
// from it.
var testHook func(op, path string)

func hook(op, path string) {
	if testHook != nil {
		testHook(op, path)
	}
}

func typeOf(mode uint32) Type {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return TypeFIFO
	case unix.S_IFSOCK:
		return TypeSocket
	case unix.S_IFCHR:
		return TypeChar
	case unix.S_IFBLK:
		return TypeBlock
	}
	return ""
}

func ifmt(t Type) uint32 {
	switch t {
	case TypeFIFO:
		return unix.S_IFIFO
	case TypeSocket:
		return unix.S_IFSOCK
	case TypeChar:
		return unix.S_IFCHR
	case TypeBlock:
		return unix.S_IFBLK
	}
	return 0
}

func tsNano(ts unix.Timespec) int64 { return ts.Sec*1e9 + ts.Nsec }

func nanoTS(ns int64) unix.Timespec { return unix.NsecToTimespec(ns) }

// entryOf fills the stat part of an Entry.
func entryOf(path string, st *unix.Stat_t) Entry {
	e := Entry{
		Path:  path,
		Type:  typeOf(st.Mode),
		Mode:  st.Mode & 07777,
		UID:   st.Uid,
		GID:   st.Gid,
		Atime: tsNano(st.Atim),
		Mtime: tsNano(st.Mtim),
		Ctime: tsNano(st.Ctim),
		Dev:   st.Dev,
		Ino:   st.Ino,
		Nlink: uint32(st.Nlink),
	}
	switch e.Type {
	case TypeFile:
		e.Size = st.Size
	case TypeChar, TypeBlock:
		e.Rdev = st.Rdev
	}
	return e
}

// lstat returns nil, nil for a missing path.
func lstat(p string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return nil, nil
		}
		return nil, err
	}
	return &st, nil
}

// listXattrs reads every extended attribute of p without following a
// symlink. A filesystem without xattrs gives an empty map.
func listXattrs(p string) (map[string][]byte, error) {
	buf := make([]byte, 256)
	var n int
	var err error
	for {
		n, err = unix.Llistxattr(p, buf)
		if err == unix.ERANGE {
			sz, err2 := unix.Llistxattr(p, nil)
			if err2 != nil {
				return nil, err2
			}
			buf = make([]byte, sz+64)
			continue
		}
		break
	}
	if err != nil {
		if err == unix.ENOTSUP || err == unix.EOPNOTSUPP {
			return nil, nil
		}
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v, err := getXattr(p, name)
		if err == unix.ENODATA {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func getXattr(p, name string) ([]byte, error) {
	buf := make([]byte, 128)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if err == unix.ERANGE {
			sz, err2 := unix.Lgetxattr(p, name, nil)
			if err2 != nil {
				return nil, err2
			}
			buf = make([]byte, sz+64)
			continue
		}
		if err != nil {
			return nil, err
		}
		return append([]byte{}, buf[:n]...), nil
	}
}

func xattrsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || string(v) != string(w) {
			return false
		}
	}
	return true
}

// join is path.Join for a clean absolute dir and one name.
func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// excluded reports whether p is, or is below, one of ex.
func excluded(p string, ex []string) bool {
	for _, x := range ex {
		if p == x || strings.HasPrefix(p, x+"/") {
			return true
		}
	}
	return false
}

// visitFunc sees one path; it returns whether to descend into a directory.
type visitFunc func(p string, st *unix.Stat_t) (bool, error)

// walkScopes visits every existing path of every scope in pre-order
// (names sorted), never following symlinks, skipping excluded paths.
func walkScopes(scopes []Scope, ex []string, visit visitFunc) error {
	return walkRoots(scopes, ex, visit, false)
}

// walkTolerant is walkScopes that skips what it cannot list or stat
// (another session's tree, best effort) instead of failing; visit's
// errors still stop it.
func walkTolerant(scopes []Scope, ex []string, visit visitFunc) error {
	return walkRoots(scopes, ex, visit, true)
}

func walkRoots(scopes []Scope, ex []string, visit visitFunc, tolerant bool) error {
	for _, s := range scopes {
		if excluded(s.Path, ex) {
			continue
		}
		st, err := lstat(s.Path)
		if err != nil && tolerant {
			continue
		}
		if err != nil {
			return pathErr("stat", s.Path, err, s.Path)
		}
		if st == nil {
			continue
		}
		down, err := visit(s.Path, st)
		if err != nil {
			return err
		}
		if s.Tree && down && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := walkDir(s.Path, ex, visit, tolerant); err != nil {
				return err
			}
		}
	}
	return nil
}

func walkDir(dir string, ex []string, visit visitFunc, tolerant bool) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT || tolerant {
			return nil
		}
		return pathErr("open directory", dir, err, dir)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && !tolerant {
		return pathErr("read directory", dir, err, dir)
	}
	sort.Strings(names)
	names = slices.DeleteFunc(names, func(name string) bool { return excluded(join(dir, name), ex) })
	sts, errs := statAll(fd, names)
	for i, name := range names {
		p := join(dir, name)
		if err := errs[i]; err != nil {
			if err == unix.ENOENT || tolerant {
				continue
			}
			return pathErr("stat", p, err, p)
		}
		down, err := visit(p, &sts[i])
		if err != nil {
			return err
		}
		if down && sts[i].Mode&unix.S_IFMT == unix.S_IFDIR {
			// Pre-order: descend right away so children follow their parent.
			if err := walkDir(p, ex, visit, tolerant); err != nil {
				return err
			}
		}
	}
	return nil
}

// statAll lstats every name of directory fd. A large directory is
// stat'ed by several threads at once (path lookups in one directory run
// in parallel in the kernel): a session's backup walks /usr/bin, a
// node_modules or a home directory before its agent may start. The
// results are in names' order, so the walk's order does not change.
func statAll(fd int, names []string) ([]unix.Stat_t, []error) {
	sts, errs := make([]unix.Stat_t, len(names)), make([]error, len(names))
	stat := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			errs[i] = unix.Fstatat(fd, names[i], &sts[i], unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), 4, len(names)/parallelStatMin)
	if workers < 2 {
		stat(0, len(names))
		return sts, errs
	}
	var wg sync.WaitGroup
	chunk := (len(names) + workers - 1) / workers
	for lo := 0; lo < len(names); lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			stat(lo, hi)
		}(lo, min(lo+chunk, len(names)))
	}
	wg.Wait()
	return sts, errs
}

// parallelStatMin is how many entries each thread of statAll gets at
// least: below it, starting threads costs more than they save.
const parallelStatMin = 256

// syncPath flushes the filesystem holding p (syncfs): one call makes every
// write to that filesystem durable, far cheaper than an fsync per file.
func syncPath(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// lockDir takes an exclusive flock on the directory root; the returned
// function releases it.
func lockDir(root string) (func(), error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Locked, but is it still the directory at root? A Take that made it
	// and failed removes it, empty, before it lets go: then the lock is on
	// nothing anyone else will lock (ESTALE: make it again, lock again).
	var locked, now unix.Stat_t
	if err := unix.Fstat(fd, &locked); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Stat(root, &now); err != nil || now.Dev != locked.Dev || now.Ino != locked.Ino {
		unix.Close(fd)
		return nil, unix.ESTALE
	}
	return func() { unix.Close(fd) }, nil
}

// removeAll removes p and everything below it without following symlinks.
func removeAll(p string) error {
	hook("remove", p)
	err := os.RemoveAll(p)
	if err != nil && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// mkdirTracked creates p (and missing parents) and appends every directory
// it created to made, parents first.
func mkdirTracked(p string, mode os.FileMode, made *[]string) error {
	if st, err := lstat(p); err != nil {
		return err
	} else if st != nil {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.ENOTDIR
		}
		return nil
	}
	if err := mkdirTracked(filepath.Dir(p), mode, made); err != nil {
		return err
	}
	if err := os.Mkdir(p, mode); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	*made = append(*made, p)
	return nil
}

// FSRoot is the highest directory above p on p's file system, found by
// walking up while the device stays the same: where every other name of
// a file at p can lie (a hard link cannot leave its file system). "/"
// when the walk reaches it or p cannot be stat'ed: the widest answer.
func FSRoot(p string) string {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return "/"
	}
	dev, root := st.Dev, filepath.Dir(p)
	for d := root; ; d = filepath.Dir(d) {
		if unix.Stat(d, &st) != nil || st.Dev != dev {
			return root
		}
		root = d
		if d == "/" {
			return "/"
		}
	}
}
