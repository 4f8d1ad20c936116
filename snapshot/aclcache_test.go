//go:build linux

package snapshot

import (
	"os"
	"path/filepath"
	"testing"

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
