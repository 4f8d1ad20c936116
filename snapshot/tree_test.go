//go:build linux

package snapshot

import (
	"fmt"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// treeState is the manifest of the whole tree at root (testutil.TreeOf:
// content hash, type, mode, owner, ns mtime, xattrs, symlink targets,
// devices, hard-link groups; root/.klock skipped).
func treeState(t testing.TB, root string) testutil.Tree { return testutil.TreeOf(t, root) }

// diffTrees lists every difference (empty when identical).
func diffTrees(want, got testutil.Tree) []string { return want.Diff(got) }

func requireSameTree(t testing.TB, what string, want, got testutil.Tree) {
	t.Helper()
	if d := diffTrees(want, got); len(d) > 0 {
		if len(d) > 20 {
			d = append(d[:20], fmt.Sprintf("... and %d more", len(d)-20))
		}
		t.Fatalf("%s: tree differs:\n%s", what, strings.Join(d, "\n"))
	}
}
