package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds klock's command cmd/NAME as dir/NAME with -trimpath, as make
// build does (static, CGO_ENABLED=0, for the binaries it builds so), plus
// extra go build flags. Without the go toolchain the error is
// exec.ErrNotFound's.
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
	cmd := exec.Command(goTool, args...)
	if staticBuilds[name] {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/%s: %v\n%s", name, err, b)
	}
	return out, nil
}

// staticBuilds are the commands the Makefile builds with CGO_ENABLED=0:
// those that start on every session's or container command's path.
var staticBuilds = map[string]bool{"klock": true, "klock-stage2": true, "klock-runtime": true}

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
