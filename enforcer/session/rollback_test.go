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
	if got, moved := changedPaths(linkOnly); !slices.Equal(got, []string{"/w/b/l", "/w/b/mine"}) || moved != nil {
		t.Errorf("linked only: %v (moved %v), want [/w/b/l /w/b/mine], none moved", got, moved)
	}
	wrote := linkOnly
	wrote.Observed = append(slices.Clone(linkOnly.Observed), obs(policy.Mutates, "/w/b/m", 1, 0, false))
	if got, want := changedOnly(wrote), []string{"/w/b/l", "/w/b/mine", "/w/b/m", "/w/a/file"}; !slices.Equal(got, want) {
		t.Errorf("written through a link of the link: %v, want %v", got, want)
	}
}

// TestChangedPathsMoved: a file whose name alone the agent moved (a
// rename, nothing written through the new name) is moved, its content
// and metadata not the agent's doing; written through its new name, or
// changed at its own, it is changed whole.
func TestChangedPathsMoved(t *testing.T) {
	rename := func(src, dst string) []decide.Observation {
		return []decide.Observation{
			{Triple: policy.FileTriple(policy.Renames, src), Count: 1},
			{Triple: policy.FileTriple(policy.Mutates, src), Count: 1, Referred: true},
			{Triple: policy.FileTriple(policy.Provides, dst), Count: 1},
		}
	}
	rec := decide.Records{Observed: rename("/w/a/f", "/w/b/s"), Aliases: map[string][]string{"/w/b/s": {"/w/a/f"}}}
	if changed, moved := changedPaths(rec); !slices.Equal(changed, []string{"/w/a/f", "/w/b/s"}) || !slices.Equal(moved, []string{"/w/a/f"}) {
		t.Errorf("renamed only: changed %v moved %v, want [/w/a/f /w/b/s] and [/w/a/f]", changed, moved)
	}
	rec.Observed = append(rec.Observed, decide.Observation{Triple: policy.FileTriple(policy.Mutates, "/w/b/s"), Count: 1})
	if _, moved := changedPaths(rec); moved != nil {
		t.Errorf("written through its new name: moved %v, want none", moved)
	}
}

func changedOnly(rec decide.Records) []string {
	changed, _ := changedPaths(rec)
	return changed
}
