//go:build linux

package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

const (
	flNodump  = 0x40
	flNoatime = 0x80
)

// flagsOf reads p's inode flags as chattr does (skips where the
// filesystem keeps none).
func flagsOf(t testing.TB, p string) uint32 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	fl, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if noAttrs(err) {
		t.Skipf("%s: the filesystem keeps no inode flags (%v)", p, err)
	}
	must(t, err)
	return fl
}

// chattr sets p's flags (the settable ones) as the agent would: an ioctl
// on a read-only descriptor.
func chattr(t testing.TB, p string, set, clear uint32) {
	t.Helper()
	fl := flagsOf(t, p)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(fl&^clear|set)))
}

type metaState struct {
	mode         uint32
	uid, gid     uint32
	atime, mtime int64
	xattrs       map[string][]byte
	flags        uint32
}

func metaOf(t testing.TB, p string) metaState {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	x, err := listXattrs(p)
	must(t, err)
	return metaState{st.Mode & 07777, st.Uid, st.Gid, tsNano(st.Atim), tsNano(st.Mtim), x, flagsOf(t, p) & flSettable}
}

func (m metaState) equal(o metaState) bool {
	return m.mode == o.mode && m.uid == o.uid && m.gid == o.gid && m.atime == o.atime && m.mtime == o.mtime && xattrsEqual(m.xattrs, o.xattrs) && m.flags == o.flags
}

// TestMetaRestoresTheAgentsFilesOutsideTheScopes: a
// file the agent owns outside every scope (its own file in /tmp, in no
// intent) cannot be written, but its metadata can be changed (chmod,
// utimes, xattrs, inode flags: no Landlock right covers them). Take
// records its metadata, not its content, in the MetaScopes regions, and a
// Restore limited to the changed path puts mode, owner, times, xattrs and
// flags back on the same inode. What the agent could not change is not
// recorded, nor walked where it cannot search.
func TestMetaRestoresTheAgentsFilesOutsideTheScopes(t *testing.T) {
	testutil.RequirePrivileged(t) // chown to the agent's uid
	const agentUID = 4012346
	agent := uint32(agentUID)
	base := t.TempDir()
	work := filepath.Join(base, "work")
	write(t, filepath.Join(work, "a.txt"), []byte("a\n"), 0o644)
	must(t, os.Chown(filepath.Join(work, "a.txt"), agentUID, agentUID))
	tmp := filepath.Join(base, "tmp")
	must(t, os.Mkdir(tmp, 0o755))
	must(t, unix.Chmod(tmp, 0o1777))
	mine := filepath.Join(tmp, "mine.txt")
	write(t, mine, []byte("mine\n"), 0o640)
	must(t, unix.Lsetxattr(mine, "user.tag", []byte("v1"), 0))
	chattr(t, mine, flNodump, 0)
	ownDir := filepath.Join(tmp, "own")
	deep := filepath.Join(ownDir, "deep.txt")
	write(t, deep, []byte("deep\n"), 0o600)
	ww := filepath.Join(tmp, "ww.txt") // root's, world-writable: utimes and user.* xattrs
	write(t, ww, []byte("ww\n"), 0o666)
	other := filepath.Join(tmp, "other.txt") // root's: nothing the agent can change
	write(t, other, []byte("other\n"), 0o644)
	hidden := filepath.Join(tmp, "priv", "hidden.txt") // the agent's, but unreachable
	write(t, hidden, []byte("hidden\n"), 0o644)
	must(t, os.Chmod(filepath.Join(tmp, "priv"), 0o700))
	for _, p := range []string{mine, ownDir, deep, hidden} {
		must(t, os.Lchown(p, agentUID, agentUID))
	}
	old := time.Date(2021, 2, 3, 4, 5, 6, 7, time.UTC)
	for _, p := range []string{mine, deep, ww} {
		must(t, os.Chtimes(p, old.Add(time.Hour), old))
	}

	s, err := Take(context.Background(), nil, Options{Dir: filepath.Join(base, "backups"), Session: "meta",
		Scopes: []Scope{{Path: work, Tree: true}}, MetaScopes: []Scope{{Path: tmp, Tree: true}, {Path: work, Tree: true}},
		AgentUID: &agent, AgentGIDs: []uint32{agentUID}})
	must(t, err)
	byPath := map[string]Entry{}
	for _, e := range s.Manifest().Entries {
		byPath[e.Path] = e
	}
	for p, want := range map[string]bool{mine: true, ownDir: true, deep: true, ww: true, other: false, hidden: false, tmp: false} {
		e, ok := byPath[p]
		if ok != want || ok && (!e.Meta || e.Hash != "") {
			t.Errorf("%s: recorded %v (meta %v, hash %q), want recorded %v, metadata only", p, ok, e.Meta, e.Hash, want)
		}
	}
	if e := byPath[filepath.Join(work, "a.txt")]; e.Meta || e.Hash == "" {
		t.Errorf("work/a.txt is in a scope: recorded in full, never as Meta (%+v)", e)
	}
	if e := byPath[mine]; e.Attrs == nil || e.Attrs.Flags&flNodump == 0 {
		t.Errorf("mine.txt: inode flags %+v, want nodump recorded", e.Attrs)
	}
	if known, _ := s.Existed(mine); known {
		t.Errorf("Existed knows mine.txt: a Meta entry says nothing of what else existed there")
	}
	if s.Stats.MetaEntries != 4 || s.Stats.MetaVisited == 0 {
		t.Errorf("stats %+v: want 4 Meta entries", s.Stats)
	}
	before := map[string]metaState{mine: metaOf(t, mine), deep: metaOf(t, deep), ww: metaOf(t, ww)}
	otherBefore := metaOf(t, other)
	// ctimes come from the kernel's coarse clock, up to a tick behind.
	time.Sleep(20 * time.Millisecond)
	cut := time.Now()
	time.Sleep(20 * time.Millisecond)

	// What the agent can do there (done here as root, the same calls).
	must(t, os.Chmod(mine, 0o777))
	must(t, unix.Lsetxattr(mine, "user.tag", []byte("v2"), 0))
	must(t, unix.Lsetxattr(mine, "user.new", []byte("x"), 0))
	chattr(t, mine, flNoatime, flNodump)
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, mine, []unix.Timespec{{Sec: 1}, {Nsec: unix.UTIME_OMIT}}, 0)) // atime only
	must(t, os.Chown(deep, agentUID, 0))
	chattr(t, deep, flNodump|flNoatime, 0)
	must(t, os.Chtimes(ww, time.Now(), time.Now()))
	must(t, unix.Lsetxattr(ww, "user.x", []byte("1"), 0))
	must(t, os.Chmod(other, 0o600)) // root's own change: not restored

	changed, err := s.ChangedSince(cut)
	must(t, err)
	for _, p := range []string{mine, deep, ww} {
		if !contains(changed, p) {
			t.Errorf("ChangedSince(%v) = %v, want %s listed", cut, changed, p)
		}
	}

	rep, err := s.Restore(context.Background(), SpareOthersNew(), ReportUnrecorded(),
		Only(Scope{Path: work, Tree: true}, Scope{Path: mine, Tree: true}, Scope{Path: ownDir, Tree: true}, Scope{Path: ww, Tree: true}))
	if err != nil {
		t.Fatalf("Restore: %v\n%+v", err, rep.Entries)
	}
	for p, want := range before {
		if got := metaOf(t, p); !got.equal(want) {
			t.Errorf("%s after Restore: %+v\nwant %+v", p, got, want)
		}
	}
	for _, p := range []string{mine, deep, ww} {
		if a := actionOf(rep, p); a != Restored {
			t.Errorf("%s: action %q, want restored", p, a)
		}
	}
	if got := metaOf(t, other); got.mode != 0o600 || otherBefore.mode != 0o644 {
		t.Errorf("other.txt mode %o: root's own change is not the agent's and stays", got.mode)
	}
	// Again: nothing left to do.
	rep, err = s.Restore(context.Background(), SpareOthersNew(), ReportUnrecorded(), Only(Scope{Path: mine, Tree: true}))
	must(t, err)
	if a := actionOf(rep, mine); a != Unchanged {
		t.Errorf("second Restore: mine.txt %q, want unchanged", a)
	}
	// (Read last: a read moves its atime, which a restore would put back.)
	if got, _ := os.ReadFile(mine); string(got) != "mine\n" {
		t.Errorf("mine.txt = %q: Restore writes no content of a Meta entry", got)
	}
}

// TestUnrecordedChangeIsReported: a path the agent changed that the backup
// holds nothing of (outside every scope and every MetaScopes region, or
// past the walk's limit) cannot be put back; Restore with ReportUnrecorded
// says so, path by path, and fails with ErrIncomplete, instead of
// finishing as if the rollback were whole. Paths only read (exact roots)
// are not changes.
func TestUnrecordedChangeIsReported(t *testing.T) {
	testutil.RequirePrivileged(t)
	const agentUID = 4012347
	agent := uint32(agentUID)
	base := t.TempDir()
	work := filepath.Join(base, "work")
	write(t, filepath.Join(work, "a.txt"), []byte("a\n"), 0o644)
	far := filepath.Join(base, "far.txt")
	write(t, far, []byte("far\n"), 0o644)
	region := filepath.Join(base, "many")
	for i := range 20 {
		write(t, filepath.Join(region, "f"+string(rune('a'+i))), []byte("x"), 0o644)
	}
	last := filepath.Join(region, "ft")
	for _, p := range []string{far, region, last} {
		must(t, os.Chown(p, agentUID, agentUID))
	}
	s, err := Take(context.Background(), nil, Options{Dir: filepath.Join(base, "backups"), Session: "unrec",
		Scopes: []Scope{{Path: work, Tree: true}}, MetaScopes: []Scope{{Path: region, Tree: true}}, MetaLimit: 5,
		AgentUID: &agent, AgentGIDs: []uint32{agentUID}})
	must(t, err)
	if got := s.Manifest().MetaCut; len(got) != 1 || got[0] != region {
		t.Fatalf("MetaCut = %v, want [%s] (the walk stopped at 5 paths)", got, region)
	}
	must(t, os.Chmod(far, 0o777))
	must(t, os.Chmod(last, 0o777))

	rep, err := s.Restore(context.Background(), SpareOthersNew(), ReportUnrecorded(),
		Only(Scope{Path: work, Tree: true}, Scope{Path: far, Tree: true}, Scope{Path: last, Tree: true}, Scope{Path: "/etc/passwd"}))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Restore = %v, want ErrIncomplete: two changes could not be undone", err)
	}
	failed := map[string]string{}
	for _, f := range rep.Failed() {
		failed[f.Path] = f.Error
	}
	if len(failed) != 2 || !strings.Contains(failed[far], "no pre-session record") || !strings.Contains(failed[last], "stopped before it") {
		t.Errorf("failed = %v, want far.txt (nothing recorded) and many/ft (the walk stopped) only", failed)
	}

	// Without ReportUnrecorded (or without a limit) nothing is claimed.
	if _, err := s.Restore(context.Background(), Only(Scope{Path: far, Tree: true})); err != nil {
		t.Errorf("Restore without ReportUnrecorded: %v", err)
	}
}

// TestInodeFlagsRestoredInScopes: inode
// flags are metadata the owner sets by an ioctl on a read-only descriptor
// (nodump, noatime), and a rollback puts them back on the files of the
// scopes too: on a file left in place, and on one recreated from the
// store, whose immutable or append-only flag goes on after its rename.
func TestInodeFlagsRestoredInScopes(t *testing.T) {
	testutil.RequirePrivileged(t) // the append-only and immutable flags
	base := t.TempDir()
	work := filepath.Join(base, "work")
	ro := filepath.Join(work, "ro.txt")
	write(t, ro, []byte("ro\n"), 0o644)
	kept := filepath.Join(work, "kept.txt")
	write(t, kept, []byte("kept\n"), 0o644)
	chattr(t, kept, flNodump, 0)
	logf := filepath.Join(work, "log", "app.log")
	write(t, logf, []byte("v1\n"), 0o644)
	chattr(t, logf, flAppend|flNodump, 0)
	t.Cleanup(func() { chattr(t, logf, 0, flAppend|flImmutable) })     // let t.TempDir go
	hl1, hl2 := filepath.Join(work, "hl1"), filepath.Join(work, "hl2") // one inode, two names
	write(t, hl1, []byte("h1\n"), 0o644)
	must(t, os.Link(hl1, hl2))
	chattr(t, hl1, flAppend, 0)
	t.Cleanup(func() { chattr(t, hl1, 0, flAppend|flImmutable) })
	before := map[string]metaState{ro: metaOf(t, ro), kept: metaOf(t, kept), logf: metaOf(t, logf), hl1: metaOf(t, hl1), hl2: metaOf(t, hl2)}

	s, err := Take(context.Background(), nil, Options{Dir: filepath.Join(base, "backups"), Session: "flags", Scopes: []Scope{{Path: work, Tree: true}}})
	must(t, err)

	chattr(t, ro, flNodump|flNoatime, 0)
	chattr(t, kept, 0, flNodump)
	// Someone with the capability: a new content, then immutable.
	chattr(t, logf, 0, flAppend)
	write(t, logf, []byte("v2\n"), 0o644)
	chattr(t, logf, flImmutable, 0)
	chattr(t, hl1, 0, flAppend)
	write(t, hl1, []byte("h2\n"), 0o644)
	chattr(t, hl1, flImmutable, 0)

	rep, err := s.Restore(context.Background(), All())
	if err != nil {
		t.Fatalf("Restore: %v\n%+v", err, rep.Entries)
	}
	for p, want := range before {
		got := metaOf(t, p)
		if got.flags != want.flags || got.mode != want.mode {
			t.Errorf("%s: flags %#x mode %o after Restore, want flags %#x mode %o", p, got.flags, got.mode, want.flags, want.mode)
		}
	}
	if got, _ := os.ReadFile(logf); string(got) != "v1\n" {
		t.Errorf("log/app.log = %q, want v1 back", got)
	}
	var s1, s2 unix.Stat_t
	must(t, unix.Lstat(hl1, &s1))
	must(t, unix.Lstat(hl2, &s2))
	if got, _ := os.ReadFile(hl2); string(got) != "h1\n" || s1.Ino != s2.Ino {
		t.Errorf("hl2 = %q (inode %d, hl1's %d), want h1 on one inode again", got, s2.Ino, s1.Ino)
	}
}

func contains(s []string, p string) bool {
	for _, q := range s {
		if q == p {
			return true
		}
	}
	return false
}

func actionOf(rep Report, p string) Action {
	for _, e := range rep.Entries {
		if e.Path == p {
			return e.Action
		}
	}
	return ""
}

// TestOpenReadsVersion1: backups taken before Meta entries and inode flags
// (manifest version 1) still open and restore; a version 1 reader refuses
// a version 2 manifest instead of restoring a Meta entry's missing content.
func TestOpenReadsVersion1(t *testing.T) {
	base := t.TempDir()
	work := filepath.Join(base, "work")
	write(t, filepath.Join(work, "a.txt"), []byte("a\n"), 0o644)
	root := filepath.Join(base, "backups")
	s, err := Take(context.Background(), nil, Options{Dir: root, Session: "v1", Scopes: []Scope{{Path: work, Tree: true}}})
	must(t, err)
	if s.Manifest().Version != manifestVersion {
		t.Fatalf("Take wrote version %d, want %d", s.Manifest().Version, manifestVersion)
	}
	p := filepath.Join(root, "v1", manifestFile)
	data, err := os.ReadFile(p)
	must(t, err)
	must(t, os.WriteFile(p, []byte(strings.Replace(string(data), `"version":3`, `"version":1`, 1)), 0o600))
	o, err := Open(root, "v1")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(work, "a.txt"), []byte("changed\n"), 0o644))
	if _, err := o.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(work, "a.txt")); string(got) != "a\n" {
		t.Errorf("a.txt = %q after restoring a version 1 backup", got)
	}
}
