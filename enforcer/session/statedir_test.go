//go:build linux

package session

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

func TestStateDirRefusesPlantedState(t *testing.T) {
	testutil.RequirePrivileged(t)
	wd := t.TempDir()
	if p, err := StateDir(wd); err != nil || p != filepath.Join(wd, ".klock") {
		t.Fatalf("fresh workdir: %q %v", p, err)
	}
	if st, _ := os.Stat(filepath.Join(wd, ".klock")); st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", st.Mode())
	}

	planted := t.TempDir()
	os.Symlink(t.TempDir(), filepath.Join(planted, ".klock"))
	if _, err := StateDir(planted); !errors.Is(err, ErrSetup) {
		t.Fatalf("a symlink .klock was accepted: %v", err)
	}

	foreign := t.TempDir()
	os.Mkdir(filepath.Join(foreign, ".klock"), 0o700)
	os.Chown(filepath.Join(foreign, ".klock"), 65534, 65534)
	if _, err := StateDir(foreign); !errors.Is(err, ErrSetup) {
		t.Fatalf("a .klock owned by another user was accepted: %v", err)
	}

	open := t.TempDir()
	os.Mkdir(filepath.Join(open, ".klock"), 0o777)
	os.Chmod(filepath.Join(open, ".klock"), 0o777)
	if _, err := StateDir(open); !errors.Is(err, ErrSetup) {
		t.Fatalf("a world-writable .klock was accepted: %v", err)
	}
}
