//go:build linux

package testutil

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Tree is a manifest of a directory tree: for every path relative to its
// root (the root itself is "."), one line of what a rollback must put back.
type Tree map[string]string

// TreeOf walks root (skipping root/.klock) and records, per path: the type,
// permission bits, owner, mtime in nanoseconds, every extended attribute
// and its value, the content's SHA-256 and size (files), the target
// (symlinks), the device number (devices), and the hard-link group (the
// first path in sorted order sharing the inode). Directory structure is
// the set of paths itself. ctime and atime are left out: no restore can set
// the one, and reading the tree changes the other.
func TreeOf(t testing.TB, root string) Tree {
	t.Helper()
	tr := Tree{}
	groups := map[[2]uint64][]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".klock" {
			return filepath.SkipDir
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "type=%o mode=%04o uid=%d gid=%d mtime=%d", st.Mode&unix.S_IFMT, st.Mode&07777, st.Uid, st.Gid, st.Mtim.Nano())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " size=%d sha256=%x", st.Size, sha256.Sum256(data))
			if st.Nlink > 1 {
				k := [2]uint64{st.Dev, st.Ino}
				groups[k] = append(groups[k], rel)
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " target=%q", target)
		case unix.S_IFCHR, unix.S_IFBLK:
			fmt.Fprintf(&b, " rdev=%d", st.Rdev)
		}
		xs, err := xattrs(p)
		if err != nil {
			return fmt.Errorf("xattrs of %s: %w", p, err)
		}
		b.WriteString(xs)
		tr[rel] = b.String()
		return nil
	})
	if err != nil {
		t.Fatalf("manifest of %s: %v", root, err)
	}
	for _, paths := range groups {
		sort.Strings(paths)
		for _, p := range paths {
			tr[p] += fmt.Sprintf(" links=%d:%s", len(paths), paths[0])
		}
	}
	return tr
}

// xattrs lists p's extended attributes (not following a symlink) as
// " xattr:NAME=HEX" in name order.
func xattrs(p string) (string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err == unix.ENOTSUP {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var names []string
	for _, name := range bytes.Split(buf[:n], []byte{0}) {
		if len(name) > 0 {
			names = append(names, string(name))
		}
	}
	sort.Strings(names)
	var b strings.Builder
	val := make([]byte, 64<<10)
	for _, name := range names {
		m, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, " xattr:%s=%x", name, val[:m])
	}
	return b.String(), nil
}

// Diff lists every difference from want to got, sorted (nil when the trees
// are identical).
func (want Tree) Diff(got Tree) []string {
	var d []string
	for p, w := range want {
		switch g, ok := got[p]; {
		case !ok:
			d = append(d, fmt.Sprintf("missing %s: %s", p, w))
		case g != w:
			d = append(d, fmt.Sprintf("differs %s:\n    want %s\n    got  %s", p, w, g))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			d = append(d, fmt.Sprintf("extra %s: %s", p, g))
		}
	}
	sort.Strings(d)
	return d
}
