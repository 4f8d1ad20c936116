package testutil

import (
	"os"
	"path/filepath"
)

// CopySelf copies the running test binary to dir/name with mode 0755: go
// test builds into a 0700 directory, which an agent uid cannot reach, and
// tests re-execute themselves as agents and probes.
func CopySelf(dir, name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		return "", err
	}
	return dst, nil
}
