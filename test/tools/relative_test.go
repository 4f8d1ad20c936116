package tools

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// Every relative path klock tools serve takes is resolved once, at start,
// against the directory it started in: --state-dir (TestRelativeStateDir),
// --plugins and --audit too, though the plugin sessions run elsewhere.
func TestRelativePluginsAndAudit(t *testing.T) {
	testutil.RequirePrivileged(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	plugin(t, filepath.Join(base, "plugins"), "hello", `{"network":false,"filesystem":false}`, "read -r line\nprintf '{\"output\":\"hi\"}\\n'\n")
	url, stop := serve(t, base, "plugins", readTools("hello"), "--state-dir", "rel-state", "--audit", "rel-audit.jsonl")
	if r := post(t, url, `{"tool":"hello","args":{}}`); !r.OK || string(r.Output) != `"hi"` {
		t.Fatalf("a plugin call with --plugins plugins --state-dir rel-state --audit rel-audit.jsonl: %+v", r)
	}
	stop()
	for _, p := range []string{"rel-audit.jsonl", "rel-state/gateway"} {
		if _, err := os.Stat(filepath.Join(base, p)); err != nil {
			t.Errorf("%s is not under the directory klock tools serve started in: %v", p, err)
		}
	}
}
