package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// ModuleRoot is the module's root directory, for a test in the package
// dir levels below it (test/install: "../.."); a directory without go.mod
// fails the test.
func ModuleRoot(tb testing.TB, up string) string {
	tb.Helper()
	dir, err := filepath.Abs(up)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		tb.Fatalf("module root %s: %v", dir, err)
	}
	return dir
}
