package lease

import (
	"context"
	"errors"
	"path"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
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

// TestUncleanClaimsRefused: a FILE claim on a path that is not clean and
// absolute is refused (ErrInvalid), whether or not its directory is
// leased already (the index vouches for the directories it has).
func TestUncleanClaimsRefused(t *testing.T) {
	ctx := context.Background()
	tb := NewTable()
	h := Holder{Agent: "a", Session: "a"}
	if d, err := tb.Acquire(ctx, Request{Holder: h, Claims: []Claim{claim(t, "MUTATES FILE:/a/b/c")}}); err != nil || d.Outcome != Granted {
		t.Fatal(d.Outcome, err)
	}
	other := Holder{Agent: "b", Session: "b"}
	for _, p := range []string{"/a/b/.", "/a/b/..", "/a/b/", "/a//b", "/a/./b", "/x/../a", "a/b", "", "/a/b/c/"} {
		c := Claim{Predicate: policy.Consumes, Resource: Resource{Type: policy.ObjFile, Path: policy.PathPattern{Path: p}}, Intent: p}
		r := Request{Holder: other, Claims: []Claim{claim(t, "CONSUMES FILE:/z"), c}}
		if _, err := tb.Acquire(ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("Acquire %q: %v", p, err)
		}
		if _, err := tb.Check(ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check %q: %v", p, err)
		}
		if _, err := tb.Await(ctx, r, time.Second); !errors.Is(err, ErrInvalid) {
			t.Errorf("Await %q: %v", p, err)
		}
	}
	if ls, _ := tb.List(ctx, Filter{Session: "b"}); len(ls) != 0 {
		t.Fatalf("granted with an unclean claim: %v", ls)
	}
	for _, p := range []string{"/a/b/c/d", "/a/b/.x", "/a/b/..x", "/a/b", "/"} {
		c := Claim{Predicate: policy.Consumes, Resource: Resource{Type: policy.ObjFile, Path: policy.PathPattern{Path: p}}, Intent: p}
		if _, err := tb.Check(ctx, Request{Holder: other, Claims: []Claim{c}}); err != nil {
			t.Errorf("Check %q: %v", p, err)
		}
	}
}
