//go:build linux

package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestRealToolsInContainer: git, sed and make, the host's own, run in a
// strict container through klock-runtime the way a user runs them on a
// repository bind-mounted at /workspace: the session is CLEAN, their
// results are right on the host, and nothing the manifest did not declare
// was needed.
func TestRealToolsInContainer(t *testing.T) {
	w := newWorld(t)
	intents := []string{
		"MUTATES FILE:/workspace/**", "PROVIDES FILE:/workspace/**", "DELETES FILE:/workspace/**", "RENAMES FILE:/workspace/**",
		"PROVIDES PROC:/usr/bin/*", "PROVIDES PROC:/usr/lib/git-core/*",
	}
	mpath := filepath.Join(filepath.Dir(w.work), "tools.yaml")
	if err := os.WriteFile(mpath, []byte(harness.ManifestYAML("/workspace", "strict", intents)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
cd /workspace
git init -q
git config user.email agent@example.com
git config user.name agent
printf 'hello\n' > greeting.txt
git add greeting.txt
git commit -qm first
sed -i 's/hello/hello, world/' greeting.txt
git commit -qam second
printf 'out.txt: greeting.txt\n\tcp greeting.txt out.txt\n' > Makefile
make -s
git log --format=%s | tr '\n' ' '
`
	b := ctrtest.NewBundle(t, ctrtest.BundleOptions{Rootfs: ctrtest.HostLikeRootfs(t, filepath.Join(t.TempDir(), "rootfs")),
		Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"},
		Binds:       append([]ctrtest.Bind{{Host: w.work, Container: "/workspace"}}, ctrtest.HostSystemBinds()...),
		Annotations: map[string]string{"io.klock.manifest": mpath}})
	r := ctrtest.RunC(t, w.runtime, b, "kc-tools")
	lg := w.log()
	if r.Exit != 0 || lg.Verdict != "CLEAN" {
		t.Fatalf("git, sed, make in a strict container: %+v, verdict %s, violations %+v, refused %+v", r, lg.Verdict, lg.Violations, lg.Refused)
	}
	if got := strings.TrimSpace(r.Stdout); got != "second first" {
		t.Fatalf("git log: %q", got)
	}
	if got := w.content("out.txt"); got != "hello, world\n" {
		t.Fatalf("make's out.txt = %q", got)
	}
}
