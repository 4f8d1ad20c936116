//go:build linux

package session

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// hiddenNames is r.HiddenNames for the engine (decide.WithHiddenNames):
// with the root of the file system the file lies on, found by walking up
// from it while the device stays the same (a hard link cannot leave its
// file system). A container's paths are mapped to the host's, and the
// root back when the container sees it.
func hiddenNames(r Restorer, c *Container) func(string) (int, string) {
	return func(p string) (int, string) {
		h := p
		if c != nil {
			var ok bool
			if h, ok = c.ToHost(p); !ok {
				return 0, ""
			}
		}
		n := r.HiddenNames(h)
		if n == 0 {
			return 0, ""
		}
		root := fsRoot(h)
		if c != nil {
			if cp, ok := c.ToContainer(root); ok {
				root = cp
			}
		}
		return n, root
	}
}

// fsRoot is the highest directory above p on p's device ("/" when the
// walk reaches it, or when p cannot be stat'ed: the widest answer).
func fsRoot(p string) string {
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
