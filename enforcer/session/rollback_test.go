//go:build linux

package session

import (
	"slices"
	"testing"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/policy"
)

// TestChangedPaths: what a killed session's rollback counts as changed
// (and so reclaims from another session's lease). A hard link's
// judgement of another's file is no change of it; a write through the
// link is, through a link of the link too; a failed write is not.
func TestChangedPaths(t *testing.T) {
	obs := func(pred policy.Predicate, path string, count, failed uint64, referred bool) decide.Observation {
		return decide.Observation{Triple: policy.FileTriple(pred, path), Count: count, Failed: failed, Referred: referred}
	}
	linkOnly := decide.Records{
		Observed: []decide.Observation{
			obs(policy.Mutates, "/w/a/file", 1, 0, true),
			obs(policy.Provides, "/w/b/l", 1, 0, false),
			obs(policy.Mutates, "/w/b/mine", 2, 1, false),
			obs(policy.Mutates, "/w/b/failed", 1, 1, false),
		},
		Aliases: map[string][]string{"/w/b/l": {"/w/a/file"}, "/w/b/m": {"/w/b/l"}},
	}
	if got, want := changedPaths(linkOnly), []string{"/w/b/l", "/w/b/mine"}; !slices.Equal(got, want) {
		t.Errorf("linked only: %v, want %v", got, want)
	}
	wrote := linkOnly
	wrote.Observed = append(slices.Clone(linkOnly.Observed), obs(policy.Mutates, "/w/b/m", 1, 0, false))
	if got, want := changedPaths(wrote), []string{"/w/b/l", "/w/b/mine", "/w/b/m", "/w/a/file"}; !slices.Equal(got, want) {
		t.Errorf("written through a link of the link: %v, want %v", got, want)
	}
}
