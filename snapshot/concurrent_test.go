//go:build linux

package snapshot

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestTakeBesideAFailingFirstTake: two sessions start in a workdir that
// has no backups yet. The first Take makes the backup root and fails
// (cancelled); on its way out it removes what it made, the empty root
// included, while the second waits for the root's lock. The second must
// still take its backup: sessions of one workdir now start side by side.
func TestTakeBesideAFailingFirstTake(t *testing.T) {
	f := newFixture(t)
	root := filepath.Join(t.TempDir(), "backups")
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	afterWalk = func() {
		afterWalk = nil
		go func() {
			_, err := Take(context.Background(), f.rs, Options{Dir: root, Session: "second", Scopes: DeclaredScopes(f.rs)})
			second <- err
		}()
		// Let the second reach the root's lock (a sync aid, not a timed
		// assertion: either order must end with its backup taken).
		time.Sleep(100 * time.Millisecond)
		cancel()
	}
	t.Cleanup(func() { afterWalk = nil })
	if _, err := Take(ctx, f.rs, Options{Dir: root, Session: "first", Scopes: DeclaredScopes(f.rs)}); err == nil {
		t.Fatal("the cancelled Take succeeded")
	}
	if err := <-second; err != nil {
		t.Fatalf("the second Take failed beside the first's failure: %v", err)
	}
	if _, err := Open(root, "second"); err != nil {
		t.Fatal(err)
	}
}
