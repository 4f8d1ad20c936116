package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/klocklabs/klock/enforcer/oci"
)

// installHint says how to install a runtime klock-runtime runs in front of.
var installHint = map[string]string{
	"runc": "Debian/Ubuntu: apt-get install runc; Fedora: dnf install runc",
	"crun": "Debian/Ubuntu: apt-get install crun; Fedora: dnf install crun",
}

// realRuntime is the real OCI runtime's path: --runtime-path, else
// --runtime's name, else runtime.yaml's runtime_path, else its runtime:
// name, else runc found on PATH, else crun (the probe: a host with crun
// alone needs no configuration). Never klock-runtime itself (that would
// loop).
func realRuntime(inv *invocation, cfg *oci.Config) (string, error) {
	p, name := inv.runtimePath, inv.runtimeName
	if p == "" && name == "" && cfg != nil {
		p, name = cfg.RuntimePath, cfg.Runtime
	}
	if p == "" {
		var err error
		if p, err = pickRuntime(name); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("the real OCI runtime %s: %w", p, err)
	}
	if self, err := os.Executable(); err == nil {
		if s, err := filepath.EvalSymlinks(self); err == nil && s == real {
			return "", errors.New("the real OCI runtime resolves to klock-runtime itself; name runc or crun with --runtime, --runtime-path or runtime_path")
		}
	}
	return abs, nil
}

// pickRuntime finds the runtime called name, or with no name runc, else
// crun; the error names what to install.
func pickRuntime(name string) (string, error) {
	if name != "" {
		if !slices.Contains(oci.Runtimes, name) {
			return "", fmt.Errorf("--runtime=%s: want one of %s (or --runtime-path=/full/path for another runtime)", name, strings.Join(oci.Runtimes, ", "))
		}
		p, err := findRuntime(name)
		if err != nil {
			return "", fmt.Errorf("%s (the chosen OCI runtime) is neither on PATH nor in %s: install %s (%s), or name its path with --runtime-path or runtime_path in %s",
				name, strings.Join(runtimeDirs, ", "), name, installHint[name], configPath)
		}
		return p, nil
	}
	for _, n := range oci.Runtimes {
		if p, err := findRuntime(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no OCI runtime: neither runc nor crun is on PATH or in %s; install runc (%s) or crun (%s), or name the runtime with --runtime-path=/path/to/runtime or runtime_path in %s",
		strings.Join(runtimeDirs, ", "), installHint["runc"], installHint["crun"], configPath)
}

// runtimeDirs are where distributions install runc and crun (Debian: runc
// in /usr/sbin, crun in /usr/bin). The engines run their runtime with a
// PATH of their own: podman's cleanup process runs "delete" with one that
// lacks /usr/sbin.
var runtimeDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin"}

func findRuntime(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range runtimeDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
