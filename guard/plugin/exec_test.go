package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
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

// A shell is known by what it is: its own path, a symlink, a hard link
// or a copy under another name; a program of another size or content is
// not one. permissions.exec naming any of them is ErrShell (and
// ErrManifest).
func TestShellsByInodeAndContent(t *testing.T) {
	dir := t.TempDir()
	dash, err := os.ReadFile("/usr/bin/dash")
	if err != nil {
		t.Skip("no /usr/bin/dash on this host")
	}
	copyPath := filepath.Join(dir, "formatter")
	os.WriteFile(copyPath, dash, 0o755)
	link := filepath.Join(dir, "helper")
	os.Symlink("/bin/sh", link)
	notShell := filepath.Join(dir, "almost")
	os.WriteFile(notShell, append(dash[:len(dash)-1:len(dash)-1], dash[len(dash)-1]^1), 0o755) // same size, other bytes
	s := HostShells()
	for path, want := range map[string]bool{"/bin/sh": true, "/usr/bin/dash": true, copyPath: true, link: true, notShell: false, "/usr/bin/id": false} {
		sh, err := s.Is(path)
		if err != nil || (sh != "") != want {
			t.Errorf("Is(%s) = %q, %v; want a shell: %v", path, sh, err, want)
		}
	}
	for _, prog := range []string{"/bin/sh", copyPath, link} {
		d := writePlugin(t, t.TempDir(), `{"name":"r","version":"1","entry":"run.sh","capabilities":["tool.r.invoke"],"permissions":{"exec":[`+strconv.Quote(prog)+`]}}`, "#!/bin/sh\n")
		if _, err := Load(d); !errors.Is(err, ErrShell) || !errors.Is(err, ErrManifest) {
			t.Errorf("exec %s: %v", prog, err)
		}
	}
}

// The exec rule of a plugin session: the entry, then its #! interpreter
// once, in the entry's process; any other shell exec objects, a program
// that is not a shell does not.
func TestShellGuard(t *testing.T) {
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	p := &Plugin{Manifest: Manifest{Name: "p"}, EntryPath: "/srv/p/run.sh", Interpreter: sh}
	id, _ := filepath.EvalSymlinks("/usr/bin/id")
	exec := func(pid uint32, path string) event.Event {
		return event.Event{PID: pid, Triple: policy.ExecTriple(path)}
	}
	g := newShellGuard(p)
	for i, c := range []struct {
		ev    event.Event
		allow bool
	}{
		{exec(10, p.EntryPath), true},
		{exec(10, sh), true}, // the kernel starts the interpreter
		{exec(11, id), true}, // not a shell (the wall decides on it)
		{exec(12, sh), false},
		{exec(10, sh), false}, // exec sh in the entry's process: again
	} {
		if why := g.check(c.ev); (why == "") != c.allow {
			t.Errorf("exec %d %s: %q, want allowed %v", i, c.ev.Triple.Path, why, c.allow)
		}
	}
	// The interpreter's exec in another process than the entry's is not
	// the kernel starting the script.
	g = newShellGuard(p)
	g.check(exec(10, p.EntryPath))
	if why := g.check(exec(11, sh)); why == "" {
		t.Error("a shell exec in another process passed as the entry's interpreter")
	}
}
