//go:build linux

package snapshot

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// mountImage formats a sparse image file with fstype (and mkfs's args)
// and loop-mounts it (mkfs.btrfs, mkfs.xfs: scripts/deps.sh reflink
// installs them). Only a kernel without the filesystem skips.
func mountImage(t testing.TB, fstype string, args ...string) string {
	t.Helper()
	testutil.RequirePrivileged(t)
	fss, err := os.ReadFile("/proc/filesystems")
	must(t, err)
	if !strings.Contains(string(fss), "\t"+fstype+"\n") {
		if exec.Command("modprobe", fstype).Run() != nil {
			testutil.Unavailable(t, "the kernel has no "+fstype)
		}
	}
	mkfs, err := exec.LookPath("mkfs." + fstype)
	if err != nil {
		t.Fatalf("mkfs.%s is missing: run scripts/deps.sh reflink", fstype)
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	// xfs wants 300 MB at least; the image is sparse, so it costs what
	// the filesystem writes.
	must(t, os.WriteFile(img, nil, 0o600))
	must(t, os.Truncate(img, 320<<20))
	if out, err := exec.Command(mkfs, append(append([]string{"-q"}, args...), img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mkfs, err, out)
	}
	if out, err := exec.Command("mount", "-t", fstype, "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v\n%s", fstype, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	return mnt
}

// fiemapShared says whether every extent of p is shared with another
// file (FS_IOC_FIEMAP, FIEMAP_EXTENT_SHARED; Documentation/filesystems/
// fiemap.rst), and how many extents it has.
func fiemapShared(t testing.TB, p string) (shared bool, n int) {
	t.Helper()
	const (
		fsIocFiemap    = 0xC020660B
		fiemapFlagSync = 0x1
		extentShared   = 0x2000
		maxExtents     = 64
	)
	type extent struct {
		Logical, Physical, Length uint64
		_                         [2]uint64
		Flags                     uint32
		_                         [3]uint32
	}
	type fiemap struct {
		Start, Length                  uint64
		Flags, Mapped, Count, Reserved uint32
		Extents                        [maxExtents]extent
	}
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	fm := fiemap{Length: ^uint64(0), Flags: fiemapFlagSync, Count: maxExtents}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&fm))); e != 0 {
		t.Fatalf("FIEMAP %s: %v", p, e)
	}
	shared = fm.Mapped > 0
	for _, x := range fm.Extents[:fm.Mapped] {
		shared = shared && x.Flags&extentShared != 0
	}
	return shared, int(fm.Mapped)
}

// TestReflink: on btrfs and xfs (loop-mounted images) the backup of a
// dense and of a sparse file is a FICLONE clone (Stats.Reflinked, the
// object's extents shared), and a restore of both after they were
// overwritten is a clone of the object again, byte-identical (the
// sparse one with its holes).
func TestReflink(t *testing.T) {
	for _, fstype := range []string{"btrfs", "xfs"} {
		t.Run(fstype, func(t *testing.T) {
			W := mountImage(t, fstype)
			dense := rnd(11, 1<<20)
			write(t, W+"/data/dense.bin", dense, 0o644)
			size, runs := sparseRuns()
			makeSparse(t, W+"/data/sparse.img", size, runs...)
			unix.Sync()
			rs := &policy.Ruleset{Workdir: W, Files: []policy.PathRule{rule(W+"/data", policy.MatchSubtree, policy.Mutates)}}
			s, err := Take(context.Background(), rs, Options{Session: "s"})
			must(t, err)
			if s.Stats.Copied != 2 || s.Stats.Reflinked != 2 {
				t.Fatalf("Take on %s: %+v, want both files reflinked", fstype, s.Stats)
			}
			root := filepath.Dir(s.Dir())
			for _, p := range []string{"dense.bin", "sparse.img"} {
				e := recordedEntry(t, s, W+"/data/"+p)
				if sh, n := fiemapShared(t, objectPath(root, e.Hash)); !sh {
					t.Errorf("object of %s: %d extents, not all shared: not a clone", p, n)
				}
			}
			if !isSparseHash(recordedEntry(t, s, W+"/data/sparse.img").Hash) {
				t.Error("the sparse file was not recorded by its sparse address")
			}
			// Not the source's layout exactly: xfs allocates past what
			// was written (speculative preallocation), which a clone
			// leaves out.
			obj := objectPath(root, recordedEntry(t, s, W+"/data/sparse.img").Hash)
			if !bytes.Equal(readAll(t, obj), readAll(t, W+"/data/sparse.img")) || blocksOf(t, obj) > blocksOf(t, W+"/data/sparse.img") {
				t.Errorf("object of the sparse file: other bytes, or more blocks (%d) than the file (%d)", blocksOf(t, obj), blocksOf(t, W+"/data/sparse.img"))
			}

			// Overwritten in place, and replaced by a new inode.
			write(t, W+"/data/dense.bin", rnd(12, 1<<20), 0o644)
			write(t, W+"/data/new", []byte("agent's"), 0o644)
			must(t, os.Rename(W+"/data/new", W+"/data/sparse.img"))
			if _, err := s.Restore(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readAll(t, W+"/data/dense.bin"), dense) {
				t.Error("dense file not restored byte-identical")
			}
			sameSparse(t, "restored", obj, W+"/data/sparse.img")
			for _, p := range []string{"dense.bin", "sparse.img"} {
				if sh, n := fiemapShared(t, W+"/data/"+p); !sh {
					t.Errorf("restored %s: %d extents, not all shared: copied, not cloned", p, n)
				}
			}
		})
	}
}

func readAll(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return b
}
