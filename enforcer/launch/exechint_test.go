//go:build linux

package launch

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestExecHint(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "npm")
	os.WriteFile(script, []byte("#!/usr/bin/env node\nrequire('x')\n"), 0o755)
	bin := filepath.Join(dir, "ls")
	os.WriteFile(bin, []byte("\x7fELF..."), 0o755)

	got := execHint(&StageError{Step: "exec", Path: script, Errno: syscall.EACCES}, 65534)
	for _, want := range []string{"PROVIDES PROC:" + script + " in the manifest", "#! interpreter, PROVIDES PROC:/usr/bin/env (and node, which it runs)", "uid 65534"} {
		if !strings.Contains(got, want) {
			t.Errorf("script hint %q lacks %q", got, want)
		}
	}
	if got := execHint(&StageError{Step: "exec", Path: bin, Errno: syscall.EPERM}, 1000); !strings.Contains(got, "PROVIDES PROC:"+bin+" in the manifest;") || strings.Contains(got, "#!") {
		t.Errorf("binary hint %q", got)
	}
	for _, se := range []*StageError{
		{Step: "exec", Path: bin, Errno: syscall.ENOENT}, // not a refusal
		{Step: "landlock", Errno: syscall.EACCES},
	} {
		if got := execHint(se, 1); got != "" {
			t.Errorf("%+v: hint %q, want none", se, got)
		}
	}
}
