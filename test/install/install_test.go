//go:build linux

package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

func moduleRoot(t *testing.T) string { return testutil.ModuleRoot(t, "../..") }

// need makes the test unavailable without the tools it drives.
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Unavailable(t, tool+" is missing (make deps installs it: scripts/deps.sh install)")
		}
	}
}

// run runs a command and returns its combined output, failing on error.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mustExist(t *testing.T, root string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %s", p)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// make install DESTDIR=... lays out every file under PREFIX=/usr/local,
// the units pass systemd-analyze verify as installed, a second install
// keeps the admin's configuration, bash loads the completions, and make
// uninstall removes what install laid out but the configuration.
func TestMakeInstallLayout(t *testing.T) {
	need(t, "make", "systemd-analyze", "bash")
	top := moduleRoot(t)
	dest := t.TempDir()
	run(t, nil, "make", "-C", top, "--no-print-directory", "install", "DESTDIR="+dest)
	bins := []string{"usr/local/bin/klock", "usr/local/bin/klock-cli", "usr/local/bin/klockd", "usr/local/bin/klock-stage2", "usr/local/bin/klock-runtime"}
	mustExist(t, dest, bins...)
	mustExist(t, dest, "usr/local/lib/systemd/system/klockd.service", "usr/local/lib/systemd/system/klockd.socket",
		"etc/klock/klockd.yaml", "etc/klock/trust",
		"usr/local/share/bash-completion/completions/klock", "usr/local/share/zsh/site-functions/_klock",
		"usr/local/share/fish/vendor_completions.d/klock.fish",
		"usr/local/share/man/man1/klock.1", "usr/local/share/man/man1/klock-run.1", "usr/local/share/man/man8/klockd.8")
	service := read(t, filepath.Join(dest, "usr/local/lib/systemd/system/klockd.service"))
	if !strings.Contains(service, "\nExecStart=/usr/local/bin/klockd\n") {
		t.Errorf("ExecStart is not PREFIX's klockd:\n%s", service)
	}
	verifyUnits(t, dest, "/usr/local")

	conf := filepath.Join(dest, "etc/klock/klockd.yaml")
	if err := os.WriteFile(conf, []byte("log_level: debug\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "make", "-C", top, "--no-print-directory", "install", "DESTDIR="+dest)
	if got := read(t, conf); got != "log_level: debug\n" {
		t.Errorf("make install replaced the admin's klockd.yaml: %q", got)
	}

	comp := filepath.Join(dest, "usr/local/share/bash-completion/completions/klock")
	out := run(t, nil, "bash", "--norc", "-c", `source "$1" && complete -p klock`, "bash", comp)
	if !strings.Contains(out, "klock") {
		t.Errorf("bash did not register klock's completion: %q", out)
	}

	run(t, nil, "make", "-C", top, "--no-print-directory", "uninstall", "DESTDIR="+dest)
	for _, p := range append(bins, "usr/local/lib/systemd/system/klockd.service", "usr/local/share/man/man1/klock.1", "usr/local/share/man/man8/klockd.8") {
		if _, err := os.Stat(filepath.Join(dest, p)); err == nil {
			t.Errorf("make uninstall left %s", p)
		}
	}
	mustExist(t, dest, "etc/klock/klockd.yaml")
}

// verifyUnits runs systemd-analyze verify on the units installed under
// dest: copies whose ExecStart= points into dest (verify checks the
// binary exists and is executable), with man klockd(8) found under dest's
// man pages. Any output is a finding: verify warns of an unknown option
// and still exits 0.
func verifyUnits(t *testing.T, dest, prefix string) {
	t.Helper()
	units := filepath.Join(dest, prefix, "lib/systemd/system")
	dir := t.TempDir()
	for _, u := range []string{"klockd.service", "klockd.socket"} {
		data := strings.ReplaceAll(read(t, filepath.Join(units, u)), "ExecStart="+prefix+"/bin/", "ExecStart="+dest+prefix+"/bin/")
		if err := os.WriteFile(filepath.Join(dir, u), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("systemd-analyze", "verify", filepath.Join(dir, "klockd.service"), filepath.Join(dir, "klockd.socket"))
	cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(dest, prefix, "share/man"), "SYSTEMD_LOG_LEVEL=notice")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
