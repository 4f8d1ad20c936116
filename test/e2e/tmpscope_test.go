//go:build linux

package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestTmpScopeBacksUpOnlyTheAgents: a real
// strict session whose manifest lets the agent change the host's /tmp/**
// (its workdir is in /tmp, so its /tmp is the host's), and which writes
// nothing there, stores under 1 MB of content, though /tmp holds a
// 64 MB file root owns (made here) and whatever else this machine keeps
// there. The agent runs as a uid of its own, so that nothing in /tmp is
// its by accident: only what it could change is backed up.
func TestTmpScopeBacksUpOnlyTheAgents(t *testing.T) {
	testutil.RequirePrivileged(t)
	const uid = 4012346
	base := t.TempDir()
	for p := base; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		must(t, os.Chmod(p, 0o755))
	}
	wd := filepath.Join(base, "work")
	must(t, os.Mkdir(wd, 0o755))
	must(t, os.Chown(wd, uid, uid))
	big, err := os.CreateTemp("/tmp", "klock-test-root-big-*.bin")
	must(t, err)
	t.Cleanup(func() { os.Remove(big.Name()) })
	must(t, big.Truncate(64<<20))
	must(t, big.Chmod(0o644))
	must(t, big.Close())

	m, err := policy.Parse("m.yaml", []byte(harness.ManifestYAML(wd, policy.ModeStrict, []string{
		"PROVIDES PROC:/usr/bin/true", "MUTATES FILE:/tmp/**", "PROVIDES FILE:/tmp/**"})))
	must(t, err)
	// Its leases are in a store of its own: MUTATES FILE:/tmp/** in the
	// host's would make every other session of the machine that changes
	// anything under /tmp (the other test packages' workdirs) wait or die.
	res, err := session.Run(context.Background(), session.Options{Manifest: m, Command: []string{"/usr/bin/true"},
		Backend: harness.Backend(), User: &launch.Credential{UID: uid, GID: uid}, Snapshot: session.Backup(nil),
		Leases: lease.NewTable()})
	must(t, err)
	if res.Killed || res.Exit.ExitCode() != 0 {
		t.Fatalf("session: killed %v (%s), exit %v", res.Killed, res.Reason, res.Exit)
	}

	root := session.BackupsDir(wd)
	// Content is what the backup copies (its objects); the manifest lists
	// every path walked, and grows with whatever else this host keeps in
	// /tmp.
	var stored int64
	must(t, filepath.WalkDir(filepath.Join(root, "objects"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && d == nil {
			return nil // nothing had content to copy
		}
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			stored += info.Size()
		}
		return nil
	}))
	s, err := snapshot.Open(root, res.ID)
	must(t, err)
	t.Logf("backup of a /tmp/** session: %d bytes of content stored, %d entries", stored, len(s.Manifest().Entries))
	if stored >= 1<<20 {
		t.Errorf("the backup stores %d bytes of content, want under 1 MB: /tmp holds other users' files, which the agent could not change", stored)
	}
	for _, e := range s.Manifest().Entries {
		if e.Path == big.Name() && (!e.Fixed || e.Hash != "") {
			t.Errorf("%s (root's, 0644) recorded fixed %v with content %q, want fixed without content", e.Path, e.Fixed, e.Hash)
		}
	}
}

// TestRefusedSessionLeavesNoBackup: the pre-flight backup's walk starts
// beside the walls, but a session refused before they are up (bpf-lsm
// required on a kernel that cannot load it, without --allow-degraded)
// commits no backup and leaves nothing of one, and the agent never runs.
func TestRefusedSessionLeavesNoBackup(t *testing.T) {
	testutil.RequirePrivileged(t)
	if harness.LSM() {
		t.Skip("bpf-lsm loads here: requiring it refuses nothing")
	}
	wd := t.TempDir()
	must(t, os.Chmod(wd, 0o755))
	must(t, os.Chown(wd, harness.AgentUID, harness.AgentGID))
	must(t, os.WriteFile(filepath.Join(wd, "kept"), []byte("a file the backup would hold\n"), 0o644))
	m, err := policy.Parse("m.yaml", []byte(harness.ManifestYAML(wd, policy.ModeStrict, []string{"PROVIDES PROC:/usr/bin/touch"})))
	must(t, err)
	ran := filepath.Join(wd, "ran")
	_, err = session.Run(context.Background(), session.Options{Manifest: m, Command: []string{"/usr/bin/touch", ran},
		Backend: session.BackendLSM, User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID},
		Snapshot: session.Backup(nil), Leases: lease.NewTable(), LogDir: t.TempDir()})
	if err == nil {
		t.Skip("bpf-lsm loads on this kernel: requiring it refuses nothing")
	}
	t.Logf("refused: %v", err)
	if _, serr := os.Stat(ran); serr == nil {
		t.Fatal("the agent of a refused session ran")
	}
	root := session.BackupsDir(wd)
	if l, _ := snapshot.List(root); len(l) != 0 {
		t.Errorf("a refused session left a backup: %+v", l)
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("a refused session left its backup's temporary directory %s", e.Name())
		}
	}
}
