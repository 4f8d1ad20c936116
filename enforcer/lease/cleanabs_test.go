package lease

import (
	"path"
	"testing"
)

func TestCleanAbs(t *testing.T) {
	for _, p := range []string{"/", "/a", "/a/b", "/a/", "//", "/a//b", "/.", "/..", "/a/.", "/a/..", "/a/./b", "/a/../b",
		"/.a", "/..a", "/a.", "/a..", "a", "", "/a/b/", "/.../x"} {
		want := p != "" && p[0] == '/' && path.Clean(p) == p
		if got := cleanAbs(p); got != want {
			t.Errorf("cleanAbs(%q) = %v, want %v", p, got, want)
		}
	}
}
