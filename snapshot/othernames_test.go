package snapshot

import (
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
