//go:build linux

package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestTakeOnlyWhatTheAgentCanChange: /tmp/**, a shared,
// sticky, world-writable scope with other users' files in it. Take stores
// only what the agent's uid could change (its own file, a world-writable
// one); another user's file costs no copy, a directory the agent cannot
// enter is not walked, and neither refuses the backup when it changes.
// Restore leaves them, and their new entries, alone, even with All(), and
// does not put back the times of a directory another user owns; it still
// undoes what the agent did, and moves back a directory it could not
// enter but renamed whole, content and all.
func TestTakeOnlyWhatTheAgentCanChange(t *testing.T) {
	testutil.RequirePrivileged(t) // chown to the agent's uid
	const agentUID = 4012345
	agent := uint32(agentUID)
	base := t.TempDir()
	tmp := filepath.Join(base, "tmp")
	must(t, os.Mkdir(tmp, 0o755))
	must(t, unix.Chmod(tmp, 0o1777)) // os.Chmod drops a sticky bit written as 0o1000
	root := filepath.Join(base, "backups")
	big := filepath.Join(tmp, "big.bin")
	write(t, big, rnd(7, 4<<20), 0o644)                                     // root's: readable, not writable
	write(t, filepath.Join(tmp, "private", "secret"), rnd(8, 1<<20), 0o600) // in a root-only directory
	must(t, os.Chmod(filepath.Join(tmp, "private"), 0o700))
	pub := filepath.Join(tmp, "pub")
	write(t, filepath.Join(pub, "shared.txt"), []byte("anyone may write\n"), 0o666)
	must(t, os.Chmod(pub, 0o755))
	mine := filepath.Join(tmp, "mine.txt")
	write(t, mine, []byte("mine v1\n"), 0o644)
	must(t, os.Chown(mine, agentUID, agentUID))
	// The agent's own directory around another user's it cannot enter
	// (a workdir of the same uid, with klock's root-only .klock in it):
	// it could rename that directory as a whole, and nothing inside.
	own := filepath.Join(tmp, "own")
	locked := filepath.Join(own, ".klock")
	write(t, filepath.Join(locked, "backups", "obj"), rnd(9, 2<<20), 0o400)
	must(t, os.Chmod(locked, 0o700))
	must(t, os.Chown(own, agentUID, agentUID))
	old := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	must(t, os.Chtimes(tmp, old, old))

	s, err := Take(context.Background(), nil, Options{Dir: root, Session: "tmpscope", Scopes: []Scope{{Path: tmp, Tree: true}}, AgentUID: &agent, AgentGIDs: []uint32{agentUID}})
	must(t, err)
	if s.Stats.CopiedBytes > 64<<10 {
		t.Errorf("Take copied %d bytes, want only the agent's and the world-writable file (a few bytes)", s.Stats.CopiedBytes)
	}
	byPath := map[string]Entry{}
	for _, e := range s.Manifest().Entries {
		byPath[e.Path] = e
	}
	for p, want := range map[string][2]bool{ // recorded, Fixed
		big: {true, true}, filepath.Join(tmp, "private"): {true, true}, filepath.Join(tmp, "private", "secret"): {false, false},
		pub: {true, true}, filepath.Join(pub, "shared.txt"): {true, false}, mine: {true, false}, tmp: {true, false},
		locked: {true, true}, filepath.Join(locked, "backups"): {false, false},
	} {
		e, ok := byPath[p]
		if ok != want[0] || e.Fixed != want[1] || e.Fixed && e.Hash != "" {
			t.Errorf("%s: recorded %v fixed %v hash %q, want recorded %v fixed %v, no content when fixed", p, ok, e.Fixed, e.Hash, want[0], want[1])
		}
	}
	if !byPath[filepath.Join(tmp, "private")].Closed {
		t.Errorf("private/ is not Closed: the agent cannot enter it")
	}
	if known, _ := s.Existed(filepath.Join(tmp, "private", "secret")); known {
		t.Errorf("Existed knows a path below a directory the agent cannot enter, where nothing was recorded")
	}

	// Meanwhile: the agent edits its file and makes one; root edits big.bin
	// and adds files in its directories (the agent could do neither).
	write(t, mine, []byte("mine v2\n"), 0o644)
	must(t, os.Chown(mine, agentUID, agentUID))
	made := filepath.Join(tmp, "made-by-agent")
	write(t, made, []byte("x\n"), 0o644)
	must(t, os.Chown(made, agentUID, agentUID))
	stolen := filepath.Join(own, "stolen")
	must(t, os.Rename(locked, stolen))
	write(t, big, []byte("root's later edit\n"), 0o644)
	write(t, filepath.Join(tmp, "private", "new"), []byte("root's\n"), 0o600)
	write(t, filepath.Join(pub, "new-root.txt"), []byte("root's\n"), 0o644)
	changed, err := s.ChangedSince(time.Now().Add(-time.Minute))
	must(t, err)
	for _, p := range changed {
		if p == big {
			t.Errorf("ChangedSince lists %s, which a rollback leaves (the agent could not change it)", p)
		}
	}

	if _, err := s.Restore(context.Background(), All()); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		mine: "mine v1\n", made: "<absent>", big: "root's later edit\n",
		filepath.Join(tmp, "private", "new"): "root's\n", filepath.Join(pub, "new-root.txt"): "root's\n",
		filepath.Join(locked, "backups", "obj"): string(rnd(9, 2<<20)),
	} {
		got, err := os.ReadFile(p)
		if err != nil {
			got = []byte("<absent>")
		}
		if string(got) != want {
			t.Errorf("after Restore(All) %s = %.40q, want %q", p, got, want)
		}
	}
	if _, err := os.Lstat(stolen); !os.IsNotExist(err) {
		t.Errorf("the renamed directory is still at %s (%v): Restore moves it back", stolen, err)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(tmp, &st))
	if tsNano(st.Mtim) == old.UnixNano() {
		t.Errorf("Restore put back the times of %s, another user's directory shared with every process", tmp)
	}
}
