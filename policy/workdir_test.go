package policy

import "testing"

func TestRootRemovable(t *testing.T) {
	rs := &Ruleset{Workdir: "/srv/repo"}
	for _, c := range []struct {
		p    PathPattern
		want bool
	}{
		{PathPattern{"/srv/repo/build", MatchSubtree}, true},    // parent is the workdir
		{PathPattern{"/srv/repo/src/gen", MatchSubtree}, true},  // parent below it
		{PathPattern{"/srv/repo", MatchSubtree}, false},         // parent /srv: beside the workdir
		{PathPattern{"/tmp", MatchSubtree}, false},              // parent /
		{PathPattern{"/", MatchSubtree}, false},                 // no parent
		{PathPattern{"/srv/repository/x", MatchSubtree}, false}, // a prefix of the name is not inside
		{PathPattern{"/srv/repo/build", MatchChildren}, false},  // dir/* does not cover dir
		{PathPattern{"/srv/repo/build/a.o", MatchExact}, false}, // not a subtree
	} {
		if got := rs.RootRemovable(c.p); got != c.want {
			t.Errorf("RootRemovable(%s) = %v, want %v", c.p, got, c.want)
		}
	}
	if (&Ruleset{}).RootRemovable(PathPattern{"/srv/repo/build", MatchSubtree}) {
		t.Error("no workdir: removable")
	}
	if !(&Ruleset{Workdir: "/srv/repo/"}).RootRemovable(PathPattern{"/srv/repo/build", MatchSubtree}) {
		t.Error("a workdir with a trailing slash: not removable")
	}
}
