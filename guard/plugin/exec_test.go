package plugin

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// procIntents lists the PROC intents a session manifest grants.
func procIntents(t *testing.T, m *policy.Manifest) []string {
	t.Helper()
	var out []string
	for _, in := range m.Intents {
		if in.Object.Type == policy.ObjProc {
			out = append(out, in.String())
		}
	}
	sort.Strings(out)
	return out
}

// A plugin's session may execute exactly its entry and,
// for a script, its interpreter; nothing its file permissions or the
// baseline give makes another program executable, and permissions.exec
// adds exactly the programs it names.
func TestPluginSessionExecutesOnlyEntryInterpreterAndListed(t *testing.T) {
	dir := t.TempDir()
	writable := filepath.Join(dir, "w")
	d := writePlugin(t, dir, `{"name":"p","version":"1","entry":"run.sh","capabilities":["tool.p.invoke"],
"permissions":{"filesystem":{"read":["/usr/bin/**"],"write":["`+writable+`/**"]}}}`, "#!/bin/sh\nsh -c id\n")
	os.WriteFile(filepath.Join(d, "other.sh"), []byte("#!/bin/sh\n"), 0o755)
	p, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	if p.Interpreter != sh {
		t.Fatalf("interpreter %q, want %q", p.Interpreter, sh)
	}
	m, _, err := SessionManifest(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PROVIDES PROC:" + p.EntryPath, "PROVIDES PROC:" + sh}
	sort.Strings(want)
	if got := procIntents(t, m); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("PROC intents %v, want exactly %v", got, want)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := filepath.EvalSymlinks("/usr/bin/id")
	for path, allowed := range map[string]bool{
		p.EntryPath:                           true,
		sh:                                    true,
		id:                                    false, // readable (permissions), not executable
		filepath.Join(d, "other.sh"):          false, // its own directory is readable, not executable
		filepath.Join(writable, "dropped"):    false, // written by the plugin, never executable
		"/usr/lib/x86_64-linux-gnu/libc.so.6": false,
	} {
		if got := rs.Allows(policy.ExecTriple(path)).Allowed; got != allowed {
			t.Errorf("exec %s allowed=%v, want %v", path, got, allowed)
		}
	}

	// permissions.exec names a program: exactly it is added.
	d2 := writePlugin(t, t.TempDir(), `{"name":"q","version":"1","entry":"run.sh","capabilities":["tool.q.invoke"],
"permissions":{"exec":["/usr/bin/id"]}}`, "#!/bin/sh\nid -u\n")
	p2, err := Load(d2)
	if err != nil {
		t.Fatal(err)
	}
	m2, _, _ := SessionManifest(p2, t.TempDir())
	want2 := append(append([]string(nil), "PROVIDES PROC:"+p2.EntryPath, "PROVIDES PROC:"+sh), "PROVIDES PROC:"+id)
	sort.Strings(want2)
	if got := procIntents(t, m2); strings.Join(got, "|") != strings.Join(want2, "|") {
		t.Fatalf("with exec: PROC intents %v, want %v", got, want2)
	}
	// A pattern, a relative name or a missing program is refused.
	for _, bad := range []string{`["/usr/bin/*"]`, `["id"]`, `["/no/such/program"]`, `["/etc/passwd"]`} {
		d3 := writePlugin(t, t.TempDir(), `{"name":"r","version":"1","entry":"run.sh","capabilities":["tool.r.invoke"],"permissions":{"exec":`+bad+`}}`, "#!/bin/sh\n")
		if _, err := Load(d3); err == nil || !strings.Contains(err.Error(), "permissions.exec") {
			t.Errorf("exec %s: %v", bad, err)
		}
	}
}
