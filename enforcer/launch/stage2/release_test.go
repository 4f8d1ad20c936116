//go:build linux

package stage2

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/oci/statedir"
	"golang.org/x/sys/unix"
)

// holdRelease makes a gated container's wall and release in a temporary
// state directory and takes the release's lock as the session does; it
// returns the wall file and the holder.
func holdRelease(t *testing.T) (string, *os.File) {
	t.Helper()
	dir := t.TempDir()
	wall := filepath.Join(dir, statedir.WallFileName)
	if err := os.WriteFile(filepath.Join(dir, statedir.ReleaseFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, statedir.ReleaseFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return wall, f
}

// awaitAsync starts stage 2's wait for the release of wall.
func awaitAsync(t *testing.T, wall string) <-chan error {
	t.Helper()
	fd, err := openRelease(&ContainerWall{Gated: true}, wall)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- awaitContainerRelease(fd)
		unix.Close(fd)
	}()
	return done
}

// stillWaiting fails t if the wait returned while the session holds the
// release.
func stillWaiting(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("stage 2 went on (%v) while the session held its release", err)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestContainerRelease(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		wall, holder := holdRelease(t)
		done := awaitAsync(t, wall)
		stillWaiting(t, done)
		if _, err := holder.WriteAt([]byte(statedir.ReleaseOK), 0); err != nil {
			t.Fatal(err)
		}
		holder.Close()
		if err := <-done; err != nil {
			t.Fatalf("released: %v", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		wall, holder := holdRelease(t)
		done := awaitAsync(t, wall)
		stillWaiting(t, done)
		if _, err := holder.WriteAt([]byte(statedir.ReleaseRefused+"pre-flight backup: disk full\n"), 0); err != nil {
			t.Fatal(err)
		}
		holder.Close()
		err := <-done
		if !errors.Is(err, ErrNotReleased) || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("refused: got %v", err)
		}
	})
	t.Run("klockd gone", func(t *testing.T) {
		wall, holder := holdRelease(t)
		done := awaitAsync(t, wall)
		stillWaiting(t, done)
		holder.Close() // the lock goes with the process, nothing written
		err := <-done
		if !errors.Is(err, ErrNotReleased) || !strings.Contains(err.Error(), "ended before") {
			t.Fatalf("klockd gone: got %v", err)
		}
	})
	t.Run("not gated", func(t *testing.T) {
		fd, err := openRelease(&ContainerWall{}, "/nonexistent/wall.json")
		if err != nil || fd != -1 {
			t.Fatalf("an ungated wall opens no release: %d, %v", fd, err)
		}
		if err := awaitContainerRelease(fd); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("gated without a release", func(t *testing.T) {
		_, err := openRelease(&ContainerWall{Gated: true}, filepath.Join(t.TempDir(), "wall.json"))
		if !errors.Is(err, ErrNotReleased) {
			t.Fatalf("a gated wall whose release is missing: got %v", err)
		}
	})
}
