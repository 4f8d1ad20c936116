//go:build linux

package stage2

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

// TestRuleRefusesALink: a rule path that is (or goes through) a link when
// stage 2 opens it is refused, never followed: the plan had none there,
// so the link appeared since (a rule through it would wall in its target).
func TestRuleRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	const readFile = FSRights(1 << 2) // LANDLOCK_ACCESS_FS_READ_FILE
	build := func(path string) error {
		fd, err := buildRuleset(&Wall{ABI: 1, HandledFS: readFile, Rules: []WallRule{{Path: path, Rights: readFile}}})
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	if err := build(target); errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		testutil.Unavailable(t, "no Landlock here: "+err.Error())
	} else if err != nil {
		t.Fatalf("a rule on a plain file: %v", err)
	}
	for _, p := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "dirlink", "target")} {
		if err := build(p); !errors.Is(err, unix.ELOOP) {
			t.Errorf("a rule on %s: %v, want ELOOP", p, err)
		}
	}
}
