//go:build linux

package snapshot

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestACLAnswerRememberedOnlyOnceSettled: hasACL remembers the answer of
// an inode whose ctime is over a second old, and asks the kernel again for
// one changed just now (an ACL set in the same timestamp tick would not
// move its ctime).
func TestACLAnswerRememberedOnlyOnceSettled(t *testing.T) {
	fresh := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(fresh, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(fresh, &st); err != nil {
		t.Fatal(err)
	}
	hasACL(fresh, &st)
	if _, ok := aclSeen.get(aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}); ok {
		t.Error("a file changed just now: its ACL answer was remembered")
	}
	old := "/usr/bin/env"
	if err := unix.Lstat(old, &st); err != nil {
		t.Skip(err)
	}
	want := hasACL(old, &st)
	got, ok := aclSeen.get(aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim})
	if !ok || got != want {
		t.Errorf("%s (settled): remembered %v %v, want %v", old, got, ok, want)
	}
	st.Ctim.Nsec++ // another state of the inode: asked again
	if _, ok := aclSeen.get(aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}); ok {
		t.Error("an answer was found for another ctime")
	}
}

// TestXattrsAndFlagsRememberedPerInodeState: a settled file's xattrs and
// inode flags are read once per inode state; a change to either moves its
// ctime, and the next read sees the change.
func TestXattrsAndFlagsRememberedPerInodeState(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(p, "user.v", []byte("1"), 0); err != nil {
		t.Skipf("user xattrs: %v", err)
	}
	stat := func() *unix.Stat_t {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return &st
	}
	st := stat()
	if _, err := xattrsOf(p, st); err != nil {
		t.Fatal(err)
	}
	if _, ok := xattrsSeen.get(aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}); ok {
		t.Error("a file changed just now: its xattrs were remembered")
	}
	time.Sleep(1100 * time.Millisecond) // its ctime settles
	st = stat()
	if x, err := xattrsOf(p, st); err != nil || string(x["user.v"]) != "1" {
		t.Fatalf("xattrs %q %v", x, err)
	}
	if _, ok := xattrsSeen.get(aclKey{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}); !ok {
		t.Error("a settled file's xattrs were not remembered")
	}
	if err := unix.Lsetxattr(p, "user.v", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	if x, err := xattrsOf(p, stat()); err != nil || string(x["user.v"]) != "2" {
		t.Errorf("after a change: xattrs %q %v, want user.v=2", x, err)
	}
	// An inode flag set through the ioctl (nodump: its owner may) on a
	// settled state whose flags are remembered.
	time.Sleep(1100 * time.Millisecond)
	e := entryOf(p, stat())
	if _, err := attrsOfEntry(&e); err != nil {
		t.Fatal(err)
	}
	if _, ok := attrsSeen.get(inodeStateOf(&e)); !ok {
		t.Error("a settled file's inode flags were not remembered")
	}
	was, err := readAttrs(p, TypeFile)
	if err != nil || was == nil {
		t.Skipf("inode flags: %v", err)
	}
	fd, err := openAttrs(p)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(was.Flags|0x40)); err != nil { // FS_NODUMP_FL
		t.Skipf("set inode flags: %v", err)
	}
	e = entryOf(p, stat())
	if a, err := attrsOfEntry(&e); err != nil || a == nil || a.Flags&0x40 == 0 {
		t.Errorf("after FS_IOC_SETFLAGS: flags %+v %v, want nodump", a, err)
	}
}
