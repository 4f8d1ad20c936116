package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds klock's command cmd/NAME as dir/NAME with -trimpath, as make
// build does, plus extra go build flags. Without the go toolchain the
// error is exec.ErrNotFound's.
func Build(dir, name string, flags ...string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	if name == "klock" {
		// The klock front runs the full CLI from beside itself for
		// every command but a run klockd serves.
		if _, err := Build(dir, "klock-cli", flags...); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, name)
	args := append(append([]string{"build", "-trimpath", "-o", out}, flags...), "github.com/klocklabs/klock/cmd/"+name)
	if b, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/%s: %v\n%s", name, err, b)
	}
	return out, nil
}

// BuildCommand is Build for a test: one without the go toolchain is
// Unavailable, a build that fails fails it.
func BuildCommand(tb testing.TB, dir, name string, flags ...string) string {
	tb.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		Unavailable(tb, "no go toolchain to build cmd/"+name)
	}
	out, err := Build(dir, name, flags...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
