//go:build linux

package session

import "github.com/klocklabs/klock/snapshot"

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
		root := snapshot.FSRoot(h)
		if c != nil {
			if cp, ok := c.ToContainer(root); ok {
				root = cp
			}
		}
		return n, root
	}
}
