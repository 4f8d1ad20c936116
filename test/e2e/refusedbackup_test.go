//go:build linux

package e2e

import (
	"context"
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
