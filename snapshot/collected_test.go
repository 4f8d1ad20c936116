package snapshot

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenCollectedSession: opening a backup that klock backups gc removed
// says so (ErrCollected, which is also ErrNotFound), which session, when,
// and what the user can still do, not "open .../manifest.json: no such file
// or directory"; a backup that never was says that instead.
func TestOpenCollectedSession(t *testing.T) {
	f := newFixture(t)
	s1 := f.take(t, "s1")
	f.take(t, "s2")
	root := filepath.Dir(s1.Dir())
	rep, err := GC(root, 1)
	must(t, err)
	if strings.Join(rep.Removed, ",") != "s1" || rep.Unrecorded != "" {
		t.Fatalf("GC: %+v", rep)
	}
	_, err = Open(root, "s1")
	if !errors.Is(err, ErrCollected) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of a collected session: %v, want ErrCollected (and ErrNotFound)", err)
	}
	for _, want := range []string{"s1", "klock backups gc", "keeping the newest 1", "klock log -m MANIFEST s1", "--keep"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "manifest.json") {
		t.Errorf("%q names the internal file", err)
	}
	if s := rep.Summary(); !strings.Contains(s, "removed  s1") || !strings.Contains(s, "kept the newest 1") || strings.Contains(s, "{") {
		t.Errorf("summary:\n%s", s)
	}

	_, err = Open(root, "never")
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrCollected) ||
		!strings.Contains(err.Error(), "klock backups ls") || strings.Contains(err.Error(), "manifest.json: no such file") {
		t.Fatalf("Open of a session that never had a backup: %v", err)
	}
	// The collected record is no session of its own.
	infos, err := List(root)
	must(t, err)
	if len(infos) != 1 || infos[0].Session != "s2" {
		t.Fatalf("List after GC: %+v", infos)
	}
}
