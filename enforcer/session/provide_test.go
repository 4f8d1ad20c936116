//go:build linux

package session

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/klocklabs/klock/policy"
)

func TestProvideDirs(t *testing.T) {
	base := t.TempDir()
	wd, outside := filepath.Join(base, "wd"), filepath.Join(base, "outside")
	for _, d := range []string{wd, outside, filepath.Join(wd, "exists"), filepath.Join(base, "elsewhere")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(base, "elsewhere"), filepath.Join(wd, "link")); err != nil {
		t.Fatal(err)
	}
	rule := func(p string, m policy.Match, preds ...policy.Predicate) policy.PathRule {
		var g policy.Access
		for _, pr := range preds {
			g |= policy.Grants(pr)
		}
		return policy.PathRule{Pattern: policy.PathPattern{Path: p, Match: m}, Access: policy.AccessOf(preds...), Grants: g}
	}
	rs := &policy.Ruleset{Workdir: wd, Files: []policy.PathRule{
		rule(filepath.Join(wd, "build"), policy.MatchSubtree, policy.Provides),       // made
		rule(filepath.Join(wd, "gen"), policy.MatchChildren, policy.Provides),        // made
		rule(filepath.Join(wd, "exists"), policy.MatchSubtree, policy.Provides),      // there already
		rule(filepath.Join(wd, "deep", "er"), policy.MatchSubtree, policy.Provides),  // made, with its missing parent
		rule(filepath.Join(wd, "link", "x"), policy.MatchSubtree, policy.Provides),   // parent is a link
		rule(filepath.Join(wd, "notes.txt"), policy.MatchExact, policy.Provides),     // a file
		rule(filepath.Join(wd, "ro"), policy.MatchSubtree, policy.Consumes),          // not PROVIDES
		rule(filepath.Join(wd, ".klock", "x"), policy.MatchSubtree, policy.Provides), // klock's own
		rule(filepath.Join(outside, "new"), policy.MatchSubtree, policy.Provides),    // not the agent's
		rule(filepath.Join(wd, ".klockish"), policy.MatchSubtree, policy.Provides),   // made: only .klock itself is klock's
	}}
	made, err := provideDirs(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(wd, "build"), filepath.Join(wd, "gen"), filepath.Join(wd, "deep"), filepath.Join(wd, "deep", "er"), filepath.Join(wd, ".klockish")}
	if !slices.Equal(made, want) {
		t.Errorf("made %v, want %v", made, want)
	}
	for _, p := range []string{"link/x", "notes.txt", "ro", ".klock"} {
		if _, err := os.Lstat(filepath.Join(wd, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "elsewhere", "x")); err == nil {
		t.Error("made a directory through the link")
	}
	if _, err := os.Lstat(filepath.Join(outside, "new")); err == nil {
		t.Error("made a directory outside the workdir")
	}
	if again, err := provideDirs(rs, nil); err != nil || len(again) != 0 {
		t.Errorf("second run made %v (%v)", again, err)
	}
}
