package testutil

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildCommand builds klock's command cmd/NAME as dir/NAME with -trimpath,
// as make build does, plus extra go build flags. A test without the go
// toolchain is Unavailable.
func BuildCommand(tb testing.TB, dir, name string, flags ...string) string {
	tb.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		Unavailable(tb, "no go toolchain to build cmd/"+name)
	}
	out := filepath.Join(dir, name)
	args := append(append([]string{"build", "-trimpath", "-o", out}, flags...), "github.com/klocklabs/klock/cmd/"+name)
	if b, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		tb.Fatalf("go build cmd/%s: %v\n%s", name, err, b)
	}
	return out
}
