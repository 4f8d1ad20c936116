//go:build linux

package session

import (
	"slices"
	"testing"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

func TestRollbackRoots(t *testing.T) {
	obs := func(p policy.Predicate, typ policy.ObjectType, path string) decide.Observation {
		return decide.Observation{Triple: policy.Triple{Predicate: p, Type: typ, Path: path}, Count: 1}
	}
	rec := decide.Records{Observed: []decide.Observation{
		obs(policy.Consumes, policy.ObjFile, "/etc/hosts"), // a read changes nothing
		obs(policy.Provides, policy.ObjFile, "/tmp/new"),
		obs(policy.Mutates, policy.ObjFile, "/tmp/edited"),
		obs(policy.Deletes, policy.ObjFile, "/tmp/gone"),
		obs(policy.Renames, policy.ObjFile, "/tmp/dir"),
		obs(policy.Provides, policy.ObjProc, "/usr/bin/git"), // an exec
	}}
	tree := func(p string) snapshot.Scope { return snapshot.Scope{Path: p, Tree: true} }
	want := []snapshot.Scope{tree("/srv/repo"), {Path: "/etc/hosts"}, tree("/tmp/new"), tree("/tmp/edited"), tree("/tmp/gone"), tree("/tmp/dir")}
	if got := rollbackRoots("/srv/repo", rec); !slices.Equal(got, want) {
		t.Errorf("RollbackRoots = %v, want %v", got, want)
	}
	if got := rollbackRoots("/srv/repo", decide.Records{}); got == nil || len(got) != 1 {
		t.Errorf("nothing observed: %v, want the workdir alone (not nil: nil restores everything)", got)
	}
	lost := rec
	lost.LostTotal = 1
	if got := rollbackRoots("/srv/repo", lost); got != nil {
		t.Errorf("events lost: %v, want nil (everything)", got)
	}
	rel := rec
	rel.Observed = append(slices.Clone(rec.Observed), obs(policy.Deletes, policy.ObjFile, "NAME"))
	if got := rollbackRoots("/srv/repo", rel); got != nil {
		t.Errorf("an unresolved path: %v, want nil (everything)", got)
	}
	// open("") and other names that failed every time changed nothing.
	failed := rec
	empty := obs(policy.Consumes, policy.ObjFile, "")
	empty.Failed = 1
	failed.Observed = append(slices.Clone(rec.Observed), empty)
	if got := rollbackRoots("/srv/repo", failed); !slices.Equal(got, want) {
		t.Errorf("an unresolved path that only failed: %v, want %v", got, want)
	}
}

func TestLoggedRollbackRoots(t *testing.T) {
	lg := &vlog.Log{Observed: []vlog.Observed{
		{Triple: "MUTATES FILE:/tmp/a b", Count: 1}, // a path with a space
		{Triple: "CONSUMES FILE:/etc/hosts", Count: 2},
		{Triple: "CONSUMES NET:10.0.0.1:443/tcp", Count: 1},
		{Triple: "PROVIDES PROC:/usr/bin/git", Count: 1},
		{Triple: "CONSUMES FILE:", Count: 1, Failed: 1}, // open(""): ENOENT
	}}
	want := []snapshot.Scope{{Path: "/w", Tree: true}, {Path: "/tmp/a b", Tree: true}, {Path: "/etc/hosts"}}
	if got := LoggedRollbackRoots("/w", lg); !slices.Equal(got, want) {
		t.Errorf("LoggedRollbackRoots = %v, want %v", got, want)
	}
	lg.Lost.Total = 3
	if got := LoggedRollbackRoots("/w", lg); got != nil {
		t.Errorf("lost events: %v, want nil", got)
	}
	lg.Lost.Total = 0
	lossy := *lg
	lossy.Observed = append(slices.Clone(lg.Observed), vlog.Observed{Triple: "MUTATES FILE:/tmp/bad\ufffd", Count: 1})
	if got := LoggedRollbackRoots("/w", &lossy); got != nil {
		t.Errorf("a name the log could not keep (not UTF-8): %v, want nil", got)
	}
	lg.Observed = append(lg.Observed, vlog.Observed{Triple: "SMUDGES FILE:/tmp/x", Count: 1})
	if got := LoggedRollbackRoots("/w", lg); got != nil {
		t.Errorf("an unknown predicate: %v, want nil", got)
	}
}
