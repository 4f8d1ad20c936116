//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
	"golang.org/x/sys/unix"
)

// settableFlags are the inode flags an owner or root sets with chattr
// (the filesystem's own, such as ext4's extents flag, left out).
const settableFlags = 0x000380FF

type fileMeta struct {
	mode         uint32
	uid, gid     uint32
	atime, mtime int64
	xattrs       string
	flags        uint32
}

func metaOf(t *testing.T, p string) fileMeta {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	must(t, err)
	var xs []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 4096)
		k, err := unix.Lgetxattr(p, name, v)
		must(t, err)
		xs = append(xs, name+"="+string(v[:k]))
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	fl, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Skipf("%s: no inode flags on this filesystem (%v)", p, err)
	}
	return fileMeta{st.Mode & 07777, st.Uid, st.Gid, st.Atim.Nano(), st.Mtim.Nano(), strings.Join(xs, ","), fl & settableFlags}
}

// TestStrictKillRestoresMetadataOutsideTheWorkdir (and the inode flags'
// backup): the agent owns a file outside the workdir
// that the manifest lets it read and nothing more. It sets the file's
// inode flags (nodump, noatime: FS_IOC_SETFLAGS on a read-only
// descriptor, which no wall refuses here: the manifest declares a
// MUTATES), an xattr, its times and its mode, and the flags of a
// CONSUMES-only file in the workdir. The first chattr is the first change
// the tracepoints report, after its effect: the strict session is killed, and the rollback puts back the mode, times,
// xattrs and flags of both files (before: the outside file kept mode 0777
// and everything else, the workdir file its flags). The permissive run
// shows each step landed.
func TestStrictKillRestoresMetadataOutsideTheWorkdir(t *testing.T) {
	for _, mode := range []policy.Mode{policy.ModePermissive, policy.ModeStrict} {
		t.Run(string(mode), func(t *testing.T) {
			w := harness.NewWorld(t)
			own, ro := w.O("own.txt"), w.W("ro.txt")
			w.File(own, "own\n")
			w.File(ro, "ro\n")
			must(t, unix.Setxattr(own, "user.keep", []byte("v1"), 0))
			old := time.Date(2022, 3, 4, 5, 6, 7, 890123456, time.UTC)
			must(t, os.Chtimes(own, old.Add(time.Hour), old))
			before := map[string]fileMeta{own: metaOf(t, own), ro: metaOf(t, ro)}

			steps := []string{"chattr:" + ro, "chattr:" + own, "setxattr:" + own, "utimes:" + own, "chmod:" + own}
			// A MUTATES of its own (on a file it never touches) keeps the
			// seccomp filter from refusing metadata ioctls outright: the
			// chattr lands, is detected and is what the kill undoes. Without
			// it the refused chattr was the first violation, and whether
			// the setxattr after it ran before the kill depended on timing.
			o := w.Run(harness.Spec{Mode: mode, Intents: append([]string{
				"CONSUMES FILE:" + w.Workdir + "/**", "CONSUMES FILE:" + w.Outside + "/**",
				"MUTATES FILE:" + w.W("scratch.txt"),
			}, harness.ProbeIntents()...), Command: append([]string{harness.Probe}, steps...)})

			if mode == policy.ModeStrict {
				if !o.Res.Killed {
					t.Fatalf("strict session not killed\n%s", o.Dump())
				}
				for p, want := range before {
					if got := metaOf(t, p); got != want {
						t.Errorf("%s after the strict kill:\n got %+v\nwant %+v (as before the session)\n%s", p, got, want, o.Dump())
					}
				}
				// (Content last: reading moves atimes.) bpf-lsm refuses each
				// change before its effect: nothing to roll back there.
				want := map[string]string{own: "own\n", ro: "ro\n"}
				if harness.LSM() {
					for p, c := range want {
						if got := w.Content(p); got != c {
							t.Errorf("%s = %q, want %q", p, got, c)
						}
					}
					return
				}
				w.AssertRestored(o, want)
				return
			}
			// Permissive: what the probe did, landed (what a wall
			// refused, here or on bpf-lsm, is not a change to undo).
			got := map[string]fileMeta{own: metaOf(t, own), ro: metaOf(t, ro)}
			for _, s := range steps {
				if o.Probe[s] != "ok" {
					t.Logf("%s = %s: refused, nothing to undo", s, o.Probe[s])
					continue
				}
				op, p, _ := strings.Cut(s, ":")
				g, b := got[p], before[p]
				landed := map[string]bool{
					"chattr":   g.flags == b.flags|harness.ChattrFlags && b.flags&harness.ChattrFlags == 0,
					"setxattr": strings.Contains(g.xattrs, "user.klock=x"),
					"utimes":   g.mtime == 1e9 && g.atime == 1e9,
					"chmod":    g.mode == 0o777,
				}[op]
				if !landed {
					t.Errorf("%s = ok but %s is %+v (was %+v)", s, p, g, b)
				}
			}
			if harness.LSM() {
				return
			}
			for _, s := range steps[2:] { // no Landlock right covers them
				if o.Probe[s] != "ok" {
					t.Errorf("%s = %s, want ok: the test needs the change to land\n%s", s, o.Probe[s], o.Dump())
				}
			}
		})
	}
}

// TestUnrecordedMetadataChangeIsReported: an agent-owned file outside every
// place the pre-flight backup records metadata in (here under /srv, which
// no intent names) cannot be put back after its detected chmod. The
// rollback says so in the verification log, naming the path, instead of
// ending as if everything had been undone. Where the wall refused the chmod
// before its effect (bpf-lsm), the file is as it was.
func TestUnrecordedMetadataChangeIsReported(t *testing.T) {
	w := harness.NewWorld(t)
	dir, err := os.MkdirTemp("/srv", "klock-e2e-unrecorded-")
	if err != nil {
		t.Skipf("no /srv to put a file outside every recorded place: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	far := filepath.Join(dir, "far.txt")
	w.File(far, "far\n")

	o := w.Run(harness.Spec{Mode: policy.ModeStrict, Intents: append([]string{"CONSUMES FILE:" + w.Workdir + "/**"}, harness.ProbeIntents()...),
		Command: []string{harness.Probe, "chmod:" + far}})
	if !o.Res.Killed {
		t.Fatalf("strict session not killed\n%s", o.Dump())
	}
	if len(o.Log.Violations) > 0 && o.Log.Violations[0].Blocked {
		// A wall that decides metadata before the effect (bpf-lsm's
		// path_chmod) refused it: nothing changed, nothing to put back.
		if fi, err := os.Stat(far); err != nil || fi.Mode().Perm() == 0o777 {
			t.Errorf("%s after a refused chmod: %v %v, want its mode unchanged", far, fi.Mode(), err)
		}
		return
	}
	var found bool
	for _, r := range o.Log.Rollback {
		if r.Path == far {
			found = true
			if r.OK || !strings.Contains(r.Error, "no pre-session record") {
				t.Errorf("rollback of %s: ok=%v error %q, want a failure saying nothing was recorded", far, r.OK, r.Error)
			}
		}
	}
	if !found {
		t.Errorf("the verification log's rollback does not name %s, whose chmod stays\n%+v", far, o.Log.Rollback)
	}
}
