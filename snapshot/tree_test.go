//go:build linux

package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// node is everything the tree-equality helper compares for one path:
// content hash, type, mode, owner, mtime (ns), size, symlink target,
// device number, xattrs and hard-link group (the first path of the group).
type node struct {
	Type   Type
	Mode   uint32
	UID    uint32
	GID    uint32
	Mtime  int64
	Size   int64
	Hash   string
	Target string
	Rdev   uint64
	Xattrs string
	Group  string
}

func (n node) String() string {
	return fmt.Sprintf("%s mode=%o uid=%d gid=%d mtime=%d size=%d hash=%.12s target=%q rdev=%d xattrs={%s} group=%q",
		n.Type, n.Mode, n.UID, n.GID, n.Mtime, n.Size, n.Hash, n.Target, n.Rdev, n.Xattrs, n.Group)
}

// treeState computes the manifest of the whole tree at root (root itself
// included as "."), skipping root/.klock. Hard-link groups are named by
// their first path in sorted order.
func treeState(t testing.TB, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	type key [2]uint64
	inos := map[key][]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
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
		n := node{Type: typeOf(st.Mode), Mode: st.Mode & 07777, UID: st.Uid, GID: st.Gid, Mtime: tsNano(st.Mtim)}
		switch n.Type {
		case TypeFile:
			n.Size = st.Size
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			n.Hash = hex.EncodeToString(h.Sum(nil))
			if st.Nlink > 1 {
				inos[key{st.Dev, st.Ino}] = append(inos[key{st.Dev, st.Ino}], rel)
			}
		case TypeSymlink:
			n.Target, _ = os.Readlink(p)
		case TypeChar, TypeBlock:
			n.Rdev = st.Rdev
		}
		x, err := listXattrs(p)
		if err != nil {
			return err
		}
		var kv []string
		for k, v := range x {
			kv = append(kv, k+"="+hex.EncodeToString(v))
		}
		sort.Strings(kv)
		n.Xattrs = strings.Join(kv, ",")
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("tree state of %s: %v", root, err)
	}
	for _, paths := range inos {
		sort.Strings(paths)
		for _, p := range paths {
			n := out[p]
			n.Group = paths[0]
			out[p] = n
		}
	}
	return out
}

// diffTrees lists every difference (empty when identical).
func diffTrees(want, got map[string]node) []string {
	var d []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("missing %s (want %v)", p, w))
		case g != w:
			d = append(d, fmt.Sprintf("differs %s:\n  want %v\n  got  %v", p, w, g))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			d = append(d, fmt.Sprintf("extra %s (%v)", p, g))
		}
	}
	sort.Strings(d)
	return d
}

func requireSameTree(t testing.TB, what string, want, got map[string]node) {
	t.Helper()
	if d := diffTrees(want, got); len(d) > 0 {
		if len(d) > 20 {
			d = append(d[:20], fmt.Sprintf("... and %d more", len(d)-20))
		}
		t.Fatalf("%s: tree differs:\n%s", what, strings.Join(d, "\n"))
	}
}
