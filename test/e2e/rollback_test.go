//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
	"golang.org/x/sys/unix"
)

// mmapWrite overwrites 12 bytes in the middle of the file named by its
// argument through a shared writable mapping (no write(2) on the data).
const mmapWrite = `import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 0)
m[100:112] = b"MMAP-WRITTEN"
m.flush()
m.close()
os.close(fd)
print("mmap=ok")
`

// TestStrictRollbackRestoresEverything: a
// real strict session, with the pre-flight backup klock run takes, whose
// agent modifies, deletes, renames, creates, truncates, chmods, sets
// xattrs, retargets a symlink and writes through mmap, all inside its
// declared scopes, and then chmods a CONSUMES-only file. The chmod is not a
// Landlock right: the tracepoints detect it after the fact, the session is
// killed and rolled back. Afterwards the whole workdir (every path's
// content hash, type, mode, owner, mtime in ns, xattrs, symlink target and
// hard-link group) is identical to its state before the session, and the
// verification log lists every path the rollback put back.
func TestStrictRollbackRestoresEverything(t *testing.T) {
	w := harness.NewWorld(t)
	work, ro := w.W("work"), w.W("ro")
	wk := func(rel string) string { return filepath.Join(work, rel) }

	// The world. Everything belongs to the agent except one file under
	// work/, which it never touches and which must come out as it was.
	w.File(filepath.Join(ro, "config.txt"), "config\n")
	w.File(filepath.Join(ro, "ref.txt"), "reference\n")
	w.File(wk("modify.txt"), "v1\n")
	w.File(wk("delete.txt"), "doomed\n")
	w.File(wk("rename-src.txt"), "moving\n")
	w.File(wk("trunc.txt"), strings.Repeat("a long line of text\n", 200))
	w.File(wk("run.sh"), "#!/bin/sh\necho hi\n")
	w.File(wk("tagged.txt"), "tagged\n")
	w.File(wk("plain.txt"), "plain\n")
	w.File(wk("target-a.txt"), "A\n")
	w.File(wk("target-b.txt"), "B\n")
	w.Symlink("target-a.txt", wk("link"))
	w.File(wk("mmap.bin"), strings.Repeat("0123456789abcdef", 512))
	w.File(wk("hard-a"), "shared inode\n")
	w.File(wk("sub/deep/file.txt"), "deep\n")
	w.File(wk("sub/keep.txt"), "kept\n")
	w.File(wk("root-owned.txt"), "root\n")
	must(t, os.Link(wk("hard-a"), wk("hard-b")))
	must(t, os.Chmod(wk("run.sh"), 0o640))
	must(t, os.Chmod(wk("sub/deep"), 0o750))
	must(t, os.Chown(wk("root-owned.txt"), 0, 0))
	must(t, os.Chmod(wk("root-owned.txt"), 0o444))
	must(t, unix.Setxattr(wk("tagged.txt"), "user.klock", []byte("original"), 0))
	must(t, unix.Setxattr(wk("tagged.txt"), "user.other", []byte("kept"), 0))
	// The workdir already has its .klock, as after its first session: the
	// backup's creating it would change the workdir's own mtime, a change
	// made by klock (and visible as the new entry), not by the agent.
	must(t, os.Mkdir(filepath.Join(w.Workdir, ".klock"), 0o700))
	// Distinct, non-current mtimes (with nanoseconds) on every path,
	// children before their directories, so a restore that leaves any
	// time as the session or the restore itself made it shows.
	var paths []string
	must(t, filepath.WalkDir(w.Workdir, func(p string, _ os.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i := len(paths) - 1; i >= 0; i-- {
		ts := unix.NsecToTimespec(time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC).UnixNano() + int64(i)*1_000_000_007)
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
	}
	before := testutil.TreeOf(t, w.Workdir)

	// The agent: a sequential script, the violation last. Every step
	// before it is inside the manifest; the probe does what sh cannot
	// (truncate(2), chmod(2) and setxattr(2) themselves, rename(2)). Every
	// path is absolute, and sub/deep goes by unlink + rmdir rather than
	// rm -r: the observer does not yet resolve rm's unlinkat(dirfd, NAME)
	// and would kill the session for a DELETES of the bare NAME.
	intents := append([]string{
		"PROVIDES FILE:" + work + "/**",
		"MUTATES FILE:" + work + "/**",
		"DELETES FILE:" + work + "/**",
		"RENAMES FILE:" + work + "/**",
		"CONSUMES FILE:" + ro + "/**",
		"PROVIDES PROC:" + dash(t),
		"PROVIDES PROC:/usr/bin/rmdir",
	}, harness.ProbeIntents()...)
	steps := []string{
		"unlink:" + wk("delete.txt"),
		"unlink:" + wk("sub/deep/file.txt"), // then rmdir sub/deep
		"rename:" + wk("rename-src.txt") + ">" + wk("rename-dst.txt"),
		"trunc:" + wk("trunc.txt"),
		"chmod:" + wk("run.sh"),
		"setxattr:" + wk("tagged.txt"), // replaces user.klock
		"setxattr:" + wk("plain.txt"),  // adds one
		"symlink:target-b.txt>" + wk("link.new"),
		"rename:" + wk("link.new") + ">" + wk("link"), // retargets link
		"create:" + wk("new.txt"),
		"mkdir:" + wk("newdir"),
		"create:" + wk("newdir/inner.txt"),
	}
	mmap := ""
	if py, err := filepath.EvalSymlinks("/usr/bin/python3"); err == nil {
		intents = append(intents, "PROVIDES PROC:"+py)
		mmap = `/usr/bin/python3 -I -B -c "$MMAP" "$W/work/mmap.bin"`
	} else {
		t.Log("no /usr/bin/python3: the session does not write through mmap")
	}
	script := `set -e
printf 'v2\n' >> "$W/work/modify.txt"
printf 'through the other name\n' >> "$W/work/hard-a"
"$PROBE" ` + shellQuote(steps) + `
/usr/bin/rmdir "$W/work/sub/deep"
` + mmap
	target := filepath.Join(ro, "config.txt")
	o := runThenChmod(w, intents, script, target, "MMAP="+mmapWrite)

	// Every declared step ran and succeeded before the violation.
	for _, s := range steps {
		if o.Probe[s] != "ok" {
			t.Errorf("probe %s = %q, want ok\n%s", s, o.Probe[s], o.Dump())
		}
	}
	if mmap != "" && o.Probe["mmap"] != "ok" {
		t.Errorf("mmap write did not report ok\n%s", o.Dump())
	}
	assertKilledForChmod(t, o, target)

	// The tree is identical to before the session.
	if d := before.Diff(testutil.TreeOf(t, w.Workdir)); len(d) > 0 {
		t.Errorf("workdir differs from before the session after the rollback:\n%s\n%s", strings.Join(d, "\n"), o.Dump())
	}

	// The verification log lists each restored path, and no step failed.
	w.AssertRestored(o, nil)
	got := map[string]string{}
	for _, r := range o.Log.Rollback {
		got[r.Path] = r.Action
	}
	want := map[string]string{
		wk("modify.txt"):        "restored",
		wk("hard-a"):            "restored",
		wk("sub/deep"):          "recreated",
		wk("sub/deep/file.txt"): "recreated",
		wk("delete.txt"):        "recreated",
		// The renamed file is its own inode again, at its own name: a
		// rollback never removes a file that existed before the session.
		wk("rename-src.txt"): "moved back",
		wk("rename-dst.txt"): "",
		wk("trunc.txt"):      "restored",
		wk("run.sh"):         "restored",
		wk("tagged.txt"):     "restored",
		wk("plain.txt"):      "restored",
		wk("link"):           "restored",
		wk("new.txt"):        "removed",
		wk("newdir"):         "removed", // with what the session put in it
		target:               "restored",
	}
	if mmap != "" {
		want[wk("mmap.bin")] = "restored"
	}
	if harness.LSM() {
		// bpf-lsm refused the violating chmod before its effect: the
		// target never changed, so the rollback has nothing to do there.
		want[target] = ""
	}
	for p, a := range want {
		if got[p] != a {
			t.Errorf("rollback log: %s %q, want %q", p, got[p], a)
		}
	}
	// Anything else it lists must be a directory whose entries changed
	// (its mtime), the other name of hard-a, or inside newdir.
	maybe := []string{work, wk("sub"), wk("hard-b"), wk("newdir/inner.txt")}
	for p := range got {
		if _, ok := want[p]; !ok && !slices.Contains(maybe, p) {
			t.Errorf("rollback log lists %s (%s), which the session did not change", p, got[p])
		}
	}
	if t.Failed() {
		for _, r := range o.Log.Rollback {
			t.Logf("rollback: %s %s ok=%v %s", r.Action, r.Path, r.OK, r.Error)
		}
	}
}

// TestStrictRollbackAfterRecursiveRemove: rm -r of a directory inside the
// DELETES scope, then the same violation; the rollback brings the whole
// removed subtree back. rm unlinks by unlinkat(dirfd, NAME) and closes and
// removes each directory at once; the observer names the directory from the
// kernel's own path of its open (walked at sys_exit), remembered by inode,
// so the deletes are judged at their real paths and only the chmod kills.
func TestStrictRollbackAfterRecursiveRemove(t *testing.T) {
	w := harness.NewWorld(t)
	work, ro := w.W("work"), w.W("ro")
	w.Dir(work)
	w.Dir(filepath.Join(work, "tree"))
	w.File(filepath.Join(ro, "config.txt"), "config\n")
	w.File(filepath.Join(work, "tree", "a", "file.txt"), "a\n")
	w.File(filepath.Join(work, "tree", "b.txt"), "b\n")
	must(t, os.Mkdir(filepath.Join(w.Workdir, ".klock"), 0o700))
	before := testutil.TreeOf(t, w.Workdir)
	intents := append([]string{
		"CONSUMES FILE:" + work + "/**", // rm reads the directories
		"DELETES FILE:" + work + "/**",
		"CONSUMES FILE:" + ro + "/**",
		"PROVIDES PROC:" + dash(t),
		"PROVIDES PROC:/usr/bin/rm",
	}, harness.ProbeIntents()...)
	target := filepath.Join(ro, "config.txt")
	o := runThenChmod(w, intents, `set -e
/usr/bin/rm -r "$W/work/tree"`, target)
	assertKilledForChmod(t, o, target)
	if d := before.Diff(testutil.TreeOf(t, w.Workdir)); len(d) > 0 {
		t.Errorf("workdir differs from before the session after the rollback:\n%s", strings.Join(d, "\n"))
	}
	w.AssertRestored(o, nil)
}

// runThenChmod runs script as a strict session's agent (sh, with $W the
// workdir and $PROBE the probe), then has it chmod target, which the
// manifest only lets it read, and wait on a pipe nobody writes: only the
// kill ends it.
func runThenChmod(w *harness.World, intents []string, script, target string, env ...string) *harness.Outcome {
	w.T.Helper()
	stdin, hold, err := os.Pipe()
	if err != nil {
		w.T.Fatal(err)
	}
	defer stdin.Close()
	defer hold.Close()
	script += `
echo phase=violation
"$PROBE" ` + shellQuote([]string{"chmod:" + target}) + `
read x
echo survived
`
	return w.Run(harness.Spec{
		Intents: intents,
		Command: []string{"/bin/sh", "-c", script},
		Env:     append([]string{"W=" + w.Workdir, "PROBE=" + harness.Probe}, env...),
		Stdin:   stdin,
	})
}

// assertKilledForChmod checks the agent reached the chmod of target and
// was killed for it: detected, not blocked (chmod is not a Landlock
// right, the kernel let it through).
func assertKilledForChmod(t *testing.T, o *harness.Outcome, target string) {
	t.Helper()
	if o.Probe["phase"] != "violation" || strings.Contains(o.Stdout, "survived") {
		t.Errorf("agent output %q: want it to reach the violation and be killed there", o.Stdout)
	}
	tr := policy.FileTriple(policy.Mutates, target)
	// Landlock has no chmod right: the tracepoints detect it after the
	// effect. bpf-lsm's path_chmod refuses it before.
	o.AssertKilledFor(t, tr.String(), target, msg("MUTATES", "FILE:"+target, o.Declared(t, tr)), harness.LSM())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// shellQuote joins args as single-quoted sh words.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestStrictRollbackLeavesOthersFiles: a scope outside the workdir (as
// /tmp/** is) is shared with every other process on the machine. The
// agent creates one file there and edits another, then, while it waits,
// a process outside the session creates and edits files of its own in the
// same scope; then the agent violates and is killed. The rollback undoes
// the agent's changes (one made through a hard link it removed again)
// and leaves the other process's alone (it used
// to remove and revert them: the backup covers the whole scope, and
// Restore put the whole scope back).
func TestStrictRollbackLeavesOthersFiles(t *testing.T) {
	w := harness.NewWorld(t)
	shared, ro := w.O("shared"), w.W("ro")
	sh := func(rel string) string { return filepath.Join(shared, rel) }
	w.File(filepath.Join(ro, "config.txt"), "config\n")
	w.File(sh("agent-edit.txt"), "v1\n")
	w.File(sh("their-edit.txt"), "theirs v1\n")
	w.File(sh("linked.txt"), "linked v1\n")
	must(t, os.Mkdir(filepath.Join(w.Workdir, ".klock"), 0o700))
	intents := append([]string{
		"PROVIDES FILE:" + shared + "/**",
		"MUTATES FILE:" + shared + "/**",
		"DELETES FILE:" + shared + "/**",
		"CONSUMES FILE:" + ro + "/**",
		"PROVIDES PROC:" + dash(t),
		"PROVIDES PROC:" + harness.Real(t, "/usr/bin/ln"),
		"PROVIDES PROC:" + harness.Real(t, "/usr/bin/rm"),
	}, harness.ProbeIntents()...)
	target := filepath.Join(ro, "config.txt")
	stdin, hold, err := os.Pipe()
	must(t, err)
	defer stdin.Close()
	defer hold.Close()
	script := `set -e
printf 'agent\n' > "$S/mine.txt"
/usr/bin/ln "$S/linked.txt" "$S/other-name"
printf 'v2\n' >> "$S/other-name"
/usr/bin/rm "$S/other-name"
printf 'v2\n' >> "$S/agent-edit.txt"
read go
echo phase=violation
"$PROBE" ` + shellQuote([]string{"chmod:" + target}) + `
read x
echo survived
`
	done := make(chan *harness.Outcome, 1)
	go func() {
		done <- w.Run(harness.Spec{
			Intents: intents,
			Command: []string{"/bin/sh", "-c", script},
			Env:     []string{"S=" + shared, "PROBE=" + harness.Probe},
			Stdin:   stdin,
		})
	}()
	// Once the agent has made its changes, another process makes its own.
	deadline := time.Now().Add(30 * time.Second)
	for w.Content(sh("agent-edit.txt")) != "v1\nv2\n" {
		if time.Now().After(deadline) {
			t.Fatal("the agent never edited agent-edit.txt")
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, os.WriteFile(sh("theirs.txt"), []byte("not the agent's\n"), 0o644))
	must(t, os.WriteFile(sh("their-edit.txt"), []byte("theirs v2\n"), 0o644))
	_, err = hold.Write([]byte("go\n"))
	must(t, err)
	o := <-done
	assertKilledForChmod(t, o, target)

	if got := w.Content(sh("mine.txt")); got != "<absent>" {
		t.Errorf("mine.txt (the agent's) = %q after the rollback, want it removed", got)
	}
	if got := w.Content(sh("agent-edit.txt")); got != "v1\n" {
		t.Errorf("agent-edit.txt = %q after the rollback, want v1", got)
	}
	// Edited through a hard link that is gone by the kill: still put back.
	if got := w.Content(sh("linked.txt")); got != "linked v1\n" {
		t.Errorf("linked.txt = %q after the rollback, want linked v1", got)
	}
	if got := w.Content(sh("theirs.txt")); got != "not the agent's\n" {
		t.Errorf("theirs.txt (another process's) = %q after the rollback, want it kept", got)
	}
	if got := w.Content(sh("their-edit.txt")); got != "theirs v2\n" {
		t.Errorf("their-edit.txt (another process's edit) = %q after the rollback, want it kept", got)
	}
	w.AssertRestored(o, nil)
	for _, r := range o.Log.Rollback {
		if strings.Contains(r.Path, "their") {
			t.Errorf("rollback log lists %s (%s): another process's file", r.Path, r.Action)
		}
	}
}
