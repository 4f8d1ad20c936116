package etcdstore

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/lease"
)

// Every lease that overlaps a claim lies under one of the claim's
// conflict ranges (so the bounded read sees every conflict), and a claim
// on a path of depth d reads d+2 ranges.
func TestConflictRangesCoverEveryOverlap(t *testing.T) {
	s := New(nil, "/k", "h")
	objects := []string{
		"FILE:/**", "FILE:/*", "FILE:/repo", "FILE:/repo/**", "FILE:/repo/*", "FILE:/repo/src/**",
		"FILE:/repo/src/a.go", "FILE:/repo/src/*", "FILE:/repo/srcx/**", "FILE:/repo/docs/x.md",
		"FILE:/repository/**", "FILE:/other/**", "FILE:/repo/src/deep/er/**",
		"NET:db.internal:5432/tcp", "NET:10.0.0.0/8:1-1024/udp",
	}
	for _, x := range objects {
		cx := claim(t, "MUTATES "+x)
		ranges := s.conflictRanges([]lease.Claim{cx})
		for _, y := range objects {
			ry, err := lease.ParseResource(y)
			if err != nil {
				t.Fatal(err)
			}
			key := s.keyOf(ry, "id1")
			under := false
			for _, p := range ranges {
				under = under || strings.HasPrefix(key, p)
			}
			if lease.Overlap(cx.Resource, ry) && !under {
				t.Errorf("%s overlaps %s, but its key %q is under none of %q", x, y, key, ranges)
			}
		}
	}
	if n := len(s.conflictRanges([]lease.Claim{claim(t, "MUTATES FILE:/repo/src/**")})); n != 4 {
		t.Errorf("a depth-2 claim reads %d ranges, want 4", n)
	}
	if n := len(s.conflictRanges([]lease.Claim{claim(t, "MUTATES FILE:/**"), claim(t, "MUTATES FILE:/repo/**")})); n != 1 {
		t.Errorf("the root's range covers the rest: %d ranges", n)
	}
}
