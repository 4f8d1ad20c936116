package snapshot

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOtherNames: every recorded name of a hard-linked inode knows the
// others (a write through one changes them all), a file with one name
// has none, and a path the backup never recorded has none.
func TestOtherNames(t *testing.T) {
	f := newFixture(t)
	s := f.take(t, "names")
	cases := map[string][]string{
		f.W + "/src/hl1":     {f.W + "/src/hl2", f.W + "/src/sub/hl3"},
		f.W + "/src/hl2":     {f.W + "/src/hl1", f.W + "/src/sub/hl3"},
		f.W + "/src/sub/hl3": {f.W + "/src/hl1", f.W + "/src/hl2"},
		f.W + "/src/a.txt":   nil,
		f.W + "/docs/readme": nil,
	}
	for p, want := range cases {
		got := s.OtherNames(p)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("OtherNames(%s) = %v, want %v", p, got, want)
		}
	}
}

// TestHiddenNames: a file with a hard link outside the backup's scopes has
// a name the backup did not find; a hard-link group wholly inside, or a
// file with one name, has none.
func TestHiddenNames(t *testing.T) {
	f := newFixture(t)
	outside := filepath.Join(filepath.Dir(f.W), "outside")
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.Link(f.W+"/src/a.txt", outside+"/a-link"))
	must(t, os.Link(f.W+"/src/a.txt", outside+"/a-link2"))
	s := f.take(t, "hidden")
	for p, want := range map[string]int{
		f.W + "/src/a.txt":   2,
		f.W + "/src/hl1":     0,
		f.W + "/src/hl2":     0,
		f.W + "/docs/readme": 0,
		f.W + "/no/such":     0,
	} {
		if got := s.HiddenNames(p); got != want {
			t.Errorf("HiddenNames(%s) = %d, want %d", p, got, want)
		}
	}
}
