//go:build linux && (amd64 || arm64)

package observe

import (
	"fmt"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a`:             "/a",
		`/a\040b`:        "/a b",
		`/end\040`:       "/end ",
		`/x\011y\134z`:   "/x\ty\\z",
		`/trailing\04`:   `/trailing\04`,
		`/odd\999/thing`: `/odd\999/thing`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSBPath places a path from a filesystem's root on the mount that holds
// it, as the observer does for the inode a path-based metadata call changed.
func TestSBPath(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "a file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(f, &st); err != nil {
		t.Fatal(err)
	}
	id := statIdent(&st)
	// The mount holding f: the longest mount point that is a prefix of f
	// with f's device; its root plus the rest is f's path in its fs.
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		testutil.Unavailable(t, err.Error())
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(id.dev), unix.Minor(id.dev))
	best, rel := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		x := strings.Fields(line)
		if len(x) < 5 || x[2] != dev {
			continue
		}
		root, mp := unescapeMount(x[3]), unescapeMount(x[4])
		if (mp == "/" || strings.HasPrefix(f, mp+"/")) && len(mp) >= len(best) {
			rest := strings.TrimPrefix(f, mp)
			if mp == "/" {
				rest = f
			}
			best, rel = mp, strings.TrimSuffix(root, "/")+rest
		}
	}
	if best == "" {
		testutil.Unavailable(t, "no mount found for "+f)
	}
	rv := newResolver()
	if p, ok := rv.sbPath(uint32(os.Getpid()), nil, id, rel); !ok || p != f {
		t.Errorf("sbPath(%q) = %q, %v; want %q", rel, p, ok, f)
	}
	if p, ok := rv.sbPath(uint32(os.Getpid()), nil, ident{dev: id.dev, ino: id.ino + 1}, rel); ok {
		t.Errorf("sbPath with another inode = %q, want no match", p)
	}
}

// TestObserveKernelPathAfterSwap: writes and chmods through symlinks that
// are pointed elsewhere (l1) or removed (l2) before the reader looks (it
// polls only every 2s here) are reported on the links' targets at the time
// of the syscall: the open carries the kernel's own path of the file, and
// the chmod, where the ctime hooks attached, the inode it changed.
// The fentry subtest runs the fallback of kernels before 6.13 (fentry on
// notify_change instead of the ctime tracepoints) on this kernel: it must
// name the inode alike.
func TestObserveKernelPathAfterSwap(t *testing.T) {
	t.Run("ctime", func(t *testing.T) { observeKernelPathAfterSwap(t, false) })
	t.Run("fentry", func(t *testing.T) { observeKernelPathAfterSwap(t, true) })
}

func observeKernelPathAfterSwap(t *testing.T, fentry bool) {
	o := loadObserverOpts(t, Options{PollInterval: 2 * time.Second, WakeupBytes: 8 << 20, BatchUrgent: true, MetadataByFentry: fentry})
	if fentry && !o.NamesMetadataInodes() {
		// A kernel property, not a missing privilege: the 6.1 VM boots
		// (make vmtest) run the fallback through the e2e and escape rows.
		t.Skip("the fentry programs cannot load on this kernel (no BPF trampolines)")
	}
	s := newSession(t, o)
	if fentry && o.CtimeHooks() == 0 {
		// Loaded but not attached: the fallback would be silently absent.
		t.Fatalf("the fentry programs loaded but did not attach: %v", o.MetadataHooksErr())
	}
	dir := fixture(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		testutil.Unavailable(t, "no sh")
	}
	l1, l2 := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	target, other := filepath.Join(dir, "target.txt"), filepath.Join(dir, "a.txt")
	// The second write truncates: an open with the same flags of the same
	// file would be a repeat, counted in the kernel instead of reported.
	script := `set -e; ln -s "$3" "$1"; echo x >> "$1"; chmod 600 "$1"; ln -s "$3" "$2"; echo x > "$2"; chmod 600 "$2"
ln -s "$4" "$1.swap"; mv -T "$1.swap" "$1"; rm "$2"`
	cmd := exec.Command(sh, "-c", script, "sh", l1, l2, target, other)
	s.inCgroup(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s.drain(t)
	for _, l := range []string{l1, l2} {
		var open, chmod *Record
		for _, r := range relevant(s.got, dir) {
			switch {
			case r.Arg == l && open == nil && strings.HasPrefix(r.Event.Syscall, "open"):
				open = &r
			case r.Arg == l && strings.Contains(r.Event.Syscall, "chmod"):
				chmod = &r
			}
		}
		if open == nil || chmod == nil {
			t.Fatalf("missing the write or the chmod through %s; got:\n%s", l, describe(s.got))
		}
		t.Logf("%s: write %s (%s); chmod %s (%s)", filepath.Base(l), open.Event.Triple, open.Path, chmod.Event.Triple, chmod.Path)
		if open.Event.Triple.String() != "MUTATES FILE:"+target || open.Path != PathKernel {
			t.Errorf("write through %s: %s (%s), want MUTATES %s (kernel)", l, open.Event.Triple, open.Path, target)
		}
		if o.CtimeHooks() == 0 {
			continue // no inode for path-based metadata calls on this kernel
		}
		if chmod.Event.Triple.Path != target || chmod.Path != PathKernel || chmod.Ino == 0 {
			t.Errorf("chmod through %s: %s (%s, ino %d), want %s (kernel)", l, chmod.Event.Triple, chmod.Path, chmod.Ino, target)
		}
	}
}

// TestKernelBaseOfRelativeName: a relative name is joined to the kernel's
// path of the directory it started from, walked at sys_exit, not to
// whatever /proc says about the process's cwd when user space gets to it.
// Here mkdir and rmdir run in dir and exit, and their parent then renames
// dir: a base read back afterwards names a directory that no longer holds
// sub.
func TestKernelBaseOfRelativeName(t *testing.T) {
	o := loadObserverOpts(t, Options{PollInterval: 2 * time.Second, WakeupBytes: 8 << 20, BatchUrgent: true})
	s := newSession(t, o)
	dir := filepath.Join(fixture(t), "d")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		testutil.Unavailable(t, "no sh")
	}
	cmd := exec.Command(sh, "-c", `set -e; cd "$1"; mkdir sub; rmdir sub; cd /; mv "$1" "$1.moved"`, "sh", dir)
	s.inCgroup(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s.drain(t)
	// mkdir, then rmdir (unlinkat on arm64), by predicate.
	want := map[policy.Predicate]bool{policy.Provides: false, policy.Deletes: false}
	for _, r := range relevant(s.got, filepath.Dir(dir)) {
		for sc := range want {
			if r.Event.Triple.Predicate != sc || r.Arg != "sub" {
				continue
			}
			want[sc] = true
			if r.Event.Triple.Path != filepath.Join(dir, "sub") || r.Path == PathBestEffort || r.Path == PathNone {
				t.Errorf("%s sub: %s (%s), want %s, verified", r.Event.Syscall, r.Event.Triple, r.Path, filepath.Join(dir, "sub"))
			}
		}
	}
	for sc, seen := range want {
		if !seen {
			t.Errorf("no %s record for sub; got:\n%s", sc, describe(s.got))
		}
	}
}
