//go:build linux

package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// buildStage2 builds cmd/klock-stage2 as dir/klock-stage2 (mode 0755,
// owned by root: fit to be used) with extra go build flags.
func buildStage2(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	return buildCmd(t, dir, launcherName, flags...)
}

// buildCmd builds klock's command cmd/NAME as dir/NAME.
func buildCmd(t testing.TB, dir, name string, flags ...string) string {
	t.Helper()
	return testutil.BuildCommand(t, dir, name, flags...)
}

// launcherScript shows, from inside, what stage 2 set up: identity,
// capabilities, no_new_privs, seccomp, pid namespace, the Landlock wall
// (the agent's own file $1, outside the scope) and no descriptor beyond
// stdio (stage 2's pipes are 3-5, the launcher's descriptor 6).
const launcherScript = `while read k v rest; do case $k in Uid:|CapEff:|CapBnd:|NoNewPrivs:|Seccomp:) echo "$k$v";; esac; done </proc/self/status
for fd in 3 4 5 6 7; do [ -e /proc/self/fd/$fd ] && echo leaked=$fd; done
(read x <"$1") 2>/dev/null && echo outside=read || echo outside=denied
echo pid=$$`

const launcherWant = "Uid:65534\nCapEff:0000000000000000\nCapBnd:0000000000000000\nNoNewPrivs:1\nSeccomp:2\noutside=denied\npid=1\n"

// launched is one session run with Spec.Stage2 = stage2Path.
type launched struct {
	exe      string // /proc/PID/exe of stage 2, read before Release
	launcher string // Process.Launcher
	stdout   string
	err      error // Release's
}

func launchWith(t *testing.T, stage2Path string, stdin io.Reader) launched {
	t.Helper()
	wd := agentDir(t)
	outside := filepath.Join(agentDir(t), "outside")
	writeAgentFile(t, outside, "x\n")
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash", "CONSUMES FILE:/proc/self/**")
	var out, errb bytes.Buffer
	s := Spec{Ruleset: rs, Group: newGroup(t), User: agentUser(), Args: []string{"/bin/sh", "-c", launcherScript, "sh", outside},
		Env: []string{"PATH=/usr/bin:/bin"}, NewNetNS: true, Stage2: stage2Path, Stdin: stdin, Stdout: &out, Stderr: &errb}
	p, err := Spawn(context.Background(), s)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	// cmd.Start returned after stage 2's exec, and stage 2 waits for
	// Release before exec'ing the agent: this is the launcher's image.
	var l launched
	if l.exe, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", p.proc.Pid)); err != nil {
		t.Fatal(err)
	}
	proc, err := p.Release()
	if l.err = err; err != nil {
		if errb.Len() > 0 {
			t.Logf("stage 2's stderr: %s", errb.String())
		}
		return l
	}
	if exit, err := proc.Wait(); err != nil || exit != (Exit{}) {
		t.Fatalf("agent: %v %v; stderr %s", exit, err, errb.String())
	}
	l.launcher, l.stdout = proc.Launcher, out.String()
	return l
}

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestStage2Binary: with a fit klock-stage2, stage 2 is that binary (its
// image, seen from outside before the agent's exec) and sets the session
// up exactly as the re-executed klock does (seen from inside the agent);
// the launcher's descriptor does not reach the agent.
func TestStage2Binary(t *testing.T) {
	testutil.RequirePrivileged(t)
	bin := buildStage2(t, t.TempDir())
	for _, c := range []struct{ stage2, exe, launcher string }{
		{bin, bin, bin},
		{"", self(t), selfLauncher}, // nothing beside the test binary
	} {
		l := launchWith(t, c.stage2, nil)
		if l.err != nil {
			t.Fatalf("Stage2 %q: %v", c.stage2, l.err)
		}
		if l.exe != c.exe || l.launcher != c.launcher {
			t.Errorf("Stage2 %q: stage 2 ran %s, Launcher %q; want %s, %q", c.stage2, l.exe, l.launcher, c.exe, c.launcher)
		}
		if l.stdout != launcherWant {
			t.Errorf("Stage2 %q: the agent saw\n%s\nwant\n%s", c.stage2, l.stdout, launcherWant)
		}
	}
}

// TestStage2BinaryUnfit: a klock-stage2 that someone other than root could
// change (or that is not a plain executable file) is never run; the
// session is launched by the re-executed binary instead.
func TestStage2BinaryUnfit(t *testing.T) {
	testutil.RequirePrivileged(t)
	built := buildStage2(t, t.TempDir())
	data, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		mode    os.FileMode
		uid     int
		dirMode os.FileMode
		symlink bool
		fit     bool
	}{
		{name: "fit", mode: 0o755, dirMode: 0o755, fit: true},
		{name: "read-only fit", mode: 0o500, dirMode: 0o700, fit: true},
		{name: "group-writable", mode: 0o775, dirMode: 0o755},
		{name: "world-writable", mode: 0o757, dirMode: 0o755},
		{name: "not owned by root", mode: 0o755, uid: agentUID, dirMode: 0o755},
		{name: "group-writable directory", mode: 0o755, dirMode: 0o775},
		{name: "not executable", mode: 0o644, dirMode: 0o755},
		{name: "symbolic link", mode: 0o755, dirMode: 0o755, symlink: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, launcherName)
			target := bin
			if c.symlink {
				target = filepath.Join(dir, "real")
				if err := os.Symlink(target, bin); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(target, data, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(target, c.uid, 0); err != nil {
				t.Fatal(err)
			}
			for p, m := range map[string]os.FileMode{target: c.mode, dir: c.dirMode} {
				if err := os.Chmod(p, m); err != nil {
					t.Fatal(err)
				}
			}
			// What klock doctor shows agrees with what Spawn does.
			got, why := LauncherFor(bin)
			if c.fit && (got != bin || why != nil) || !c.fit && (got != selfLauncher || why == nil) {
				t.Errorf("LauncherFor = %q, %v; fit %v", got, why, c.fit)
			}
			l := launchWith(t, bin, nil)
			if l.err != nil {
				t.Fatal(l.err)
			}
			wantExe, wantLauncher := self(t), selfLauncher
			if c.fit {
				wantExe, wantLauncher = bin, bin
			}
			if l.exe != wantExe || l.launcher != wantLauncher {
				t.Errorf("stage 2 ran %s, Launcher %q; want %s, %q", l.exe, l.launcher, wantExe, wantLauncher)
			}
			if l.stdout != launcherWant {
				t.Errorf("the agent saw\n%s\nwant\n%s", l.stdout, launcherWant)
			}
		})
	}
}

// TestStage2BinaryOtherBuild: a klock-stage2 from another build refuses
// the spec before setting anything up; the session is launched again by
// the re-executed binary, and that file is not tried again. With a Stdin
// that is not a file a second launch could lose input, so the refusal is
// the error.
func TestStage2BinaryOtherBuild(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	bin := buildStage2(t, dir, "-ldflags=-X github.com/klocklabs/klock/enforcer/launch/stage2.Build=other")
	l := launchWith(t, bin, nil)
	if l.err != nil || l.exe != bin || l.launcher != selfLauncher || l.stdout != launcherWant {
		t.Fatalf("first session: Release %v; stage 2 ran %s, Launcher %q (want %s, then %q); agent saw\n%s", l.err, l.exe, l.launcher, bin, selfLauncher, l.stdout)
	}
	if l = launchWith(t, bin, nil); l.err != nil || l.exe != self(t) || l.launcher != selfLauncher {
		t.Fatalf("second session: Release %v; stage 2 ran %s, Launcher %q; want %s, %q", l.err, l.exe, l.launcher, self(t), selfLauncher)
	}

	// A new file (the same bytes): not known to be stale.
	copied := filepath.Join(dir, "copy")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, data, 0o755); err != nil {
		t.Fatal(err)
	}
	l = launchWith(t, copied, strings.NewReader("input"))
	var se *StageError
	if !errors.As(l.err, &se) || se.Step != stage2.StepBuild || !errors.Is(l.err, ErrSetup) || !strings.Contains(se.Msg, `build "other"`) {
		t.Fatalf("with a reader as Stdin: stage 2 ran %s, Release %v; want a StageError of step %q", l.exe, l.err, stage2.StepBuild)
	}
}

// TestStage2BesideExecutable: Spawn finds klock-stage2 beside the running
// executable (a copy of this test binary, started through a symbolic
// link), and not when the directory is writable by its group.
func TestStage2BesideExecutable(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	exe, err := testutil.CopySelf(dir, "launch.test")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildStage2(t, dir)
	link := filepath.Join(t.TempDir(), "klock")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	wd := agentDir(t)
	for _, c := range []struct {
		dirMode os.FileMode
		want    string
	}{
		{0o755, "launcher=" + bin + " exe=" + bin + " exit=0"},
		{0o775, "launcher=" + selfLauncher + " exe=" + exe + " exit=0"},
	} {
		if err := os.Chmod(dir, c.dirMode); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(link)
		cmd.Env = append(os.Environ(), "KLOCK_LAUNCH_SIBLING="+wd)
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("directory %o: got %q (%v), want %q", c.dirMode, got, err, c.want)
		}
	}
}

// siblingMain is TestStage2BesideExecutable's child: one session with
// Spec.Stage2 "" (running /bin/true in workdir), reported on stdout.
func siblingMain(workdir string) int {
	m, err := policy.Parse("sibling.yaml", []byte(manifestYAML(workdir, []string{"PROVIDES PROC:/usr/bin/true"})))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	rs, err := policy.Compile(m)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	g, err := cgroup.Create(fmt.Sprintf("launch-test-sibling-%d", os.Getpid()))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer g.Delete()
	p, err := Spawn(context.Background(), Spec{Ruleset: rs, Group: g, User: agentUser(), Args: []string{"/bin/true"}, NewNetNS: true})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.proc.Pid))
	proc, err := p.Release()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	exit, _ := proc.Wait()
	fmt.Printf("launcher=%s exe=%s exit=%d\n", proc.Launcher, exe, exit.ExitCode())
	return 0
}
