//go:build linux

package install

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// make deb's package installs with dpkg -i into a clean Debian root made
// from this machine's apt sources: its files are laid out under /usr, the
// klock group exists, nothing is enabled, klock doctor runs and reports
// klockd installed, bash completes klock's commands; dpkg -r keeps
// /var/lib/klock (backups a rollback may need) and the configuration,
// dpkg -P removes both.
func TestDebInstallsIntoCleanDebian(t *testing.T) {
	testutil.RequirePrivileged(t)
	need(t, "make", "dpkg-deb", "debootstrap", "chroot", "tar", "mount")
	top := moduleRoot(t)
	out := run(t, nil, "make", "-C", top, "--no-print-directory", "deb")
	m := regexp.MustCompile(`klock: built (\S+\.deb)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("make deb named no package:\n%s", out)
	}
	deb := filepath.Join(top, m[1])
	root := debianRoot(t)
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp/klock.deb"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	in := func(args ...string) string { return run(t, nil, "chroot", append([]string{root}, args...)...) }
	in("dpkg", "-i", "/tmp/klock.deb")
	mustExist(t, root, "usr/bin/klock", "usr/bin/klockd", "usr/bin/klock-stage2", "usr/bin/klock-runtime",
		"usr/lib/systemd/system/klockd.service", "usr/lib/systemd/system/klockd.socket", "etc/klock/klockd.yaml",
		"usr/share/bash-completion/completions/klock", "usr/share/man/man8/klockd.8.gz", "usr/share/man/man1/klock-run.1.gz")
	if s := read(t, filepath.Join(root, "usr/lib/systemd/system/klockd.service")); !strings.Contains(s, "\nExecStart=/usr/bin/klockd\n") {
		t.Errorf("the package's ExecStart:\n%s", s)
	}
	in("getent", "group", "klock")
	if _, err := os.Stat(filepath.Join(root, "etc/systemd/system/sockets.target.wants/klockd.socket")); err == nil {
		t.Error("the package enabled klockd.socket")
	}
	checkDoctor(t, root)
	checkCompletion(t, root)
	checkRemoveAndPurge(t, root, in)
}

// klock doctor runs in the root (no BPF or systemd there, maybe): it exits
// as doctor does (0 or 1) and finds klockd installed.
func checkDoctor(t *testing.T, root string) {
	t.Helper()
	out, err := exec.Command("chroot", root, "klock", "doctor").CombinedOutput()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		t.Fatalf("klock doctor in the Debian root: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`installed\s+yes \(/usr/bin/klockd, /usr/lib/systemd/system/klockd.service\)`).Match(out) ||
		!strings.Contains(string(out), "reachable  no") {
		t.Errorf("klock doctor's klockd report:\n%s", out)
	}
	t.Logf("klock doctor in the Debian root (%v):\n%s", err, out)
}

// Bash, with bash-completion as a user's shell has it, completes "klock ro"
// to rollback through the installed completion.
func checkCompletion(t *testing.T, root string) {
	t.Helper()
	script := `source /usr/share/bash-completion/bash_completion
source /usr/share/bash-completion/completions/klock
complete -p klock
COMP_WORDS=(klock ro); COMP_CWORD=1; COMP_LINE="klock ro"; COMP_POINT=${#COMP_LINE}
__start_klock klock ro klock
echo "reply: ${COMPREPLY[*]}"`
	out := run(t, nil, "chroot", root, "bash", "--norc", "-c", script)
	if !strings.Contains(out, "complete ") || !strings.Contains(out, "reply: rollback") {
		t.Errorf("bash completion of klock in the Debian root:\n%s", out)
	}
	t.Logf("bash in the Debian root:\n%s", out)
}

// dpkg -r keeps /var/lib/klock and the configuration; dpkg -P removes
// them; the group stays.
func checkRemoveAndPurge(t *testing.T, root string, in func(...string) string) {
	t.Helper()
	backup := filepath.Join(root, "var/lib/klock/backups/s1/manifest.json")
	if err := os.MkdirAll(filepath.Dir(backup), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backup, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	in("dpkg", "-r", "klock")
	mustExist(t, root, "var/lib/klock/backups/s1/manifest.json", "etc/klock/klockd.yaml")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/klockd")); err == nil {
		t.Error("dpkg -r left /usr/bin/klockd")
	}
	in("dpkg", "-P", "klock")
	for _, p := range []string{"var/lib/klock", "etc/klock/klockd.yaml"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("dpkg -P left /%s", p)
		}
	}
	in("getent", "group", "klock")
}

// debianRoot is a fresh copy of the cached clean Debian root, /proc
// mounted, unmounted at the test's end.
func debianRoot(t *testing.T) string {
	t.Helper()
	tarball := cachedRootfs(t)
	root := t.TempDir()
	run(t, nil, "tar", "-C", root, "-xf", tarball)
	run(t, nil, "mount", "-t", "proc", "proc", filepath.Join(root, "proc"))
	t.Cleanup(func() {
		if out, err := exec.Command("umount", filepath.Join(root, "proc")).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	return root
}

// cachedRootfs is the tarball of a debootstrap --variant=minbase root of
// this machine's Debian suite, made once per suite.
func cachedRootfs(t *testing.T) string {
	t.Helper()
	mirror, suite := aptSource(t)
	cache := os.Getenv("KLOCK_TEST_CACHE")
	if cache == "" {
		cache = "/var/cache/klock-test"
	}
	tarball := filepath.Join(cache, "debian-"+suite+"-minbase.tar")
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	build := filepath.Join(t.TempDir(), "rootfs")
	start := time.Now()
	// bash-completion: the test loads the completions as a user's shell
	// has them.
	run(t, nil, "debootstrap", "--variant=minbase", "--include=bash-completion", suite, build, mirror)
	tmp := tarball + ".tmp"
	run(t, nil, "tar", "-C", build, "-cf", tmp, ".")
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap of %s from %s, cached as %s: %s", suite, mirror, tarball, time.Since(start).Round(time.Second))
	return tarball
}

// aptSource is the first Debian source of this machine (deb822 .sources
// files or sources.list): its mirror and suite.
func aptSource(t *testing.T) (mirror, suite string) {
	t.Helper()
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		if m, s := deb822Source(f); m != "" {
			return m, s
		}
	}
	if m, s := listSource("/etc/apt/sources.list"); m != "" {
		return m, s
	}
	testutil.Unavailable(t, "no Debian apt source on this machine (/etc/apt/sources.list*) to debootstrap from")
	return "", ""
}

// deb822Source reads Types/URIs/Suites of a .sources file's first
// stanza of type deb.
func deb822Source(path string) (mirror, suite string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", ""
	}
	for _, stanza := range strings.Split(string(data), "\n\n") {
		f := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
				f[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		if strings.Contains(" "+f["Types"]+" ", " deb ") && f["URIs"] != "" && f["Suites"] != "" {
			return strings.Fields(f["URIs"])[0], strings.Fields(f["Suites"])[0]
		}
	}
	return "", ""
}

// listSource reads the first "deb URI SUITE" line of a sources.list.
func listSource(path string) (mirror, suite string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 3 && fields[0] == "deb" {
			i := 1
			if strings.HasPrefix(fields[1], "[") {
				for i < len(fields) && !strings.HasSuffix(fields[i], "]") {
					i++
				}
				i++
			}
			if i+1 < len(fields) {
				return fields[i], fields[i+1]
			}
		}
	}
	return "", ""
}
