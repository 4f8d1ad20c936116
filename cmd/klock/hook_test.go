//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// fakeCLI stands in for klock-cli beside the front: it records the argv
// and the stdin it was given.
const fakeCLI = "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$KLOCK_TEST_OUT.args\"\ncat > \"$KLOCK_TEST_OUT.stdin\"\n"

// TestHookHandsOverWhatItCannotServe: the front serves only the hooks
// klock-runtime prepared; everything else reaches the full CLI with the
// same arguments and, byte for byte, the state the runtime wrote on
// stdin (also one larger than a pipe's buffer).
func TestHookHandsOverWhatItCannotServe(t *testing.T) {
	dir := t.TempDir()
	front := testutil.BuildCommand(t, dir, "klock")
	if err := os.WriteFile(filepath.Join(dir, cliName), []byte(fakeCLI), 0o755); err != nil {
		t.Fatal(err)
	}
	bundle := func(annotations map[string]string) string {
		b := t.TempDir()
		spec, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "annotations": annotations})
		if err := os.WriteFile(filepath.Join(b, "config.json"), spec, 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := bundle(nil)
	// Rewritten by klock-runtime, but its state directory holds no
	// prepared request (this id never went through its create).
	rewritten := bundle(map[string]string{"io.klock.runtime": "klock-runtime"})
	state := func(bundle, status string, pid int, pad int) string {
		b, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "klock-hook-test-" + t.Name(), "status": status,
			"pid": pid, "bundle": bundle, "annotations": map[string]string{"pad": strings.Repeat("x", pad)}})
		return string(b)
	}
	for _, c := range []struct {
		name, stdin string
		args        []string
	}{
		{"hook-only mode", state(plain, "creating", os.Getpid(), 0), []string{"oci-hook", "createRuntime"}},
		{"no prepared request", state(rewritten, "created", os.Getpid(), 0), []string{"oci-hook"}},
		{"no init pid", state(rewritten, "creating", 0, 0), []string{"oci-hook", "createRuntime"}},
		{"no klockd at poststop", state(plain, "stopped", 0, 0), []string{"oci-hook", "poststop"}},
		{"a state larger than a pipe", state(plain, "creating", os.Getpid(), 200<<10), []string{"oci-hook", "createRuntime"}},
		{"not a state", "{not json", []string{"oci-hook", "createRuntime"}},
		{"a stage it does not know", state(plain, "running", 1, 0), []string{"oci-hook"}},
		{"a flag", state(plain, "creating", os.Getpid(), 0), []string{"oci-hook", "--socket", "/nowhere", "createRuntime"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cli")
			cmd := exec.Command(front, c.args...)
			cmd.Stdin = strings.NewReader(c.stdin)
			cmd.Env = append(os.Environ(), "KLOCK_TEST_OUT="+out, "KLOCK_SOCKET="+filepath.Join(dir, "no-klockd.sock"))
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("klock %s: %v\n%s", strings.Join(c.args, " "), err, b)
			}
			args, err := os.ReadFile(out + ".args")
			if err != nil {
				t.Fatalf("the full CLI did not run: %v", err)
			}
			if got, want := strings.Fields(string(args)), c.args; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("the full CLI got %q, want %q", got, want)
			}
			if got, _ := os.ReadFile(out + ".stdin"); !bytes.Equal(got, []byte(c.stdin)) {
				t.Errorf("the full CLI's stdin: %d bytes, want the %d the runtime wrote", len(got), len(c.stdin))
			}
		})
	}
}
