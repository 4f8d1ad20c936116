//go:build linux

package launch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

func TestTrustedLinks(t *testing.T) {
	testutil.RequirePrivileged(t) // root-owned links, and a chown to make untrusted ones
	base := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// base/real/bin/tool, reached as base/sys/bin/tool (sys -> real) and
	// through a relative link base/real/bin/alias -> tool.
	must(os.MkdirAll(filepath.Join(base, "real", "bin"), 0o755))
	must(os.WriteFile(filepath.Join(base, "real", "bin", "tool"), nil, 0o755))
	must(os.Symlink("real", filepath.Join(base, "sys")))
	must(os.Symlink("tool", filepath.Join(base, "real", "bin", "alias")))
	// Untrusted: a link owned by a user, and a root link in a directory
	// others may write.
	must(os.Symlink("/etc/shadow", filepath.Join(base, "real", "planted")))
	must(os.Lchown(filepath.Join(base, "real", "planted"), 1000, 1000))
	must(os.Mkdir(filepath.Join(base, "open"), 0o777))
	must(os.Chmod(filepath.Join(base, "open"), 0o777))
	must(os.Symlink("/etc/shadow", filepath.Join(base, "open", "link")))
	must(os.Symlink("loop", filepath.Join(base, "loop")))

	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{base + "/sys/bin/tool", base + "/real/bin/tool", true},
		{base + "/sys/bin/alias", base + "/real/bin/tool", true},
		{base + "/sys/bin/not-yet/x", base + "/real/bin/not-yet/x", true}, // missing parts kept
		{base + "/real/bin/tool", base + "/real/bin/tool", false},         // no link on the way
		{base + "/real/planted", "", false},
		{base + "/open/link", "", false},
		{base + "/loop", "", false},
		{"/proc/self/status", "", false}, // a different process's, in every process
		{"/dev/fd/0", "", false},
	} {
		got, ok := TrustedLinks()(c.in)
		if ok != c.ok || (c.ok && got != c.want) {
			t.Errorf("TrustedLinks()(%s) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	// In the agent's own tree, root's links are not trusted either.
	if got, ok := TrustedLinks(base + "/sys")(base + "/sys/bin/tool"); ok {
		t.Errorf("a link in an agent-owned tree was followed: %q", got)
	}
	if got, ok := TrustedLinks(base + "/real/bin")(base + "/sys/bin/tool"); !ok || got != base+"/real/bin/tool" {
		t.Errorf("no link below the agent-owned tree, yet %q %v", got, ok)
	}
}
