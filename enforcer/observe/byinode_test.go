package observe

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// An f* call whose fd is already closed is named by the inode's last
// verified path, but only while a stat shows that path still leads there.
func TestByInodeFallback(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	id := statIdent(&st)
	rv := newResolver()
	if _, ok := rv.byInode(id); ok {
		t.Fatal("unknown inode named")
	}
	rv.name(id, p)
	if got, ok := rv.byInode(id); !ok || got != p {
		t.Fatalf("byInode = %q %v, want %q", got, ok, p)
	}
	// The name now leads elsewhere: the fallback must not guess.
	if err := os.Rename(p, p+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok := rv.byInode(id); ok {
		t.Fatalf("stale name %q used for a moved inode", got)
	}
	rv.name(id, "relative/path")
	if _, ok := rv.byInode(id); ok {
		t.Fatal("a relative name was remembered")
	}
}

func TestSessionProc(t *testing.T) {
	for in, want := range map[string]string{
		"/proc/42/maps":           "/proc/self/maps",
		"/proc/42":                "/proc/self",
		"/proc/thread-self/attr":  "/proc/self/attr",
		"/proc/self/fd/3":         "/proc/self/fd/3",
		"/proc/1/root/etc/shadow": "/etc/shadow",
		"/proc/self/root":         "/",
		"/proc/7/rootfs":          "/proc/self/rootfs",
		"/proc/cpuinfo":           "/proc/cpuinfo",
		"/proc/sys/kernel/x":      "/proc/sys/kernel/x",
		"/proc":                   "/proc",
		"/etc/42":                 "/etc/42",
		"":                        "",
	} {
		if got := sessionProc(in); got != want {
			t.Errorf("sessionProc(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSelfFD(t *testing.T) {
	for in, want := range map[string]string{
		"/dev/fd/63":     "/proc/self/fd/63",
		"/dev/fd/3/x":    "/proc/self/fd/3/x",
		"/dev/fd":        "/proc/self/fd",
		"/dev/stdin":     "/proc/self/fd/0",
		"/dev/stderr":    "/proc/self/fd/2",
		"/dev/fdx":       "/dev/fdx",
		"/dev/null":      "/dev/null",
		"/srv/dev/fd/63": "/srv/dev/fd/63",
	} {
		if got := selfFD(in); got != want {
			t.Errorf("selfFD(%q) = %q, want %q", in, got, want)
		}
	}
}
