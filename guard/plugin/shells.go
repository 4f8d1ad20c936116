package plugin

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/klocklabs/klock/enforcer/event"
)

// ErrShell: a plugin's permissions.exec names a shell (seed 004 §8.3: a
// plugin launches no shell). Load wraps it with ErrManifest.
var ErrShell = errors.New("a plugin may not run a shell")

// knownShells are the shells a Debian or Ubuntu host may have besides
// what /etc/shells lists: busybox and toybox are multi-call binaries
// whose "sh" applet is a shell, whatever name they are run by.
var knownShells = []string{
	"sh", "bash", "rbash", "dash", "zsh", "ksh", "ksh93", "mksh", "lksh", "pdksh",
	"yash", "posh", "ash", "csh", "tcsh", "bsd-csh", "fish", "busybox", "toybox",
}

// Shells tells shell binaries by what they are, not by the name they are
// run by: a symlink or hard link of a shell is the same inode, a copy has
// the same bytes. The set is the files /etc/shells names and knownShells
// in /bin, /usr/bin, /usr/local/bin and /sbin, resolved, taken once.
//
// Limits: a shell this host does not have (a build of its own, a patched
// or statically linked copy whose bytes differ) is not recognized. That
// is why it matters that a plugin can execute only its entry, its
// interpreter and the programs permissions.exec names (the kernel wall's
// PROC rules): the one gap is a program an operator lists there that is
// such a shell.
type Shells struct {
	ids   map[fileID]string   // inode → the shell's path
	sums  map[[32]byte]string // content → the shell's path
	sizes map[int64]bool      // only a file of a shell's size is hashed
	mu    sync.Mutex
	seen  map[fileKey]string // verdicts by inode and version ("" not a shell)
}

type fileID struct{ dev, ino uint64 }

// fileKey is a file's identity and version: a file rewritten in place
// is hashed again.
type fileKey struct {
	fileID
	size, mtime, ctime int64
}

var (
	hostShellsOnce sync.Once
	hostShells     *Shells
)

// HostShells is the host's set, taken on first use.
func HostShells() *Shells {
	hostShellsOnce.Do(func() { hostShells = NewShells(shellPaths("/etc/shells")...) })
	return hostShells
}

// shellPaths are the candidates: /etc/shells' entries and knownShells in
// the usual directories.
func shellPaths(etcShells string) []string {
	var out []string
	if f, err := os.Open(etcShells); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "/") {
				out = append(out, l)
			}
		}
		f.Close()
	}
	for _, dir := range []string{"/bin", "/usr/bin", "/usr/local/bin", "/sbin"} {
		for _, n := range knownShells {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

// NewShells builds the set from candidate paths; a missing one is skipped.
func NewShells(paths ...string) *Shells {
	s := &Shells{ids: map[fileID]string{}, sums: map[[32]byte]string{}, sizes: map[int64]bool{}, seen: map[fileKey]string{}}
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		f, err := os.Open(real)
		if err != nil {
			continue
		}
		key, ok := keyOf(f)
		if ok && key.size > 0 {
			if sum, err := hashFile(f); err == nil {
				s.ids[key.fileID], s.sums[sum], s.sizes[key.size] = real, real, true
			}
		}
		f.Close()
	}
	return s
}

// Is reports whether path is a shell and, if so, which one it is (the
// shell's own path). A file that cannot be read is an error: the caller
// decides what an unknown program means (the plugin's rule: refused).
func (s *Shells) Is(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	key, ok := keyOf(f)
	if !ok {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	if sh, ok := s.ids[key.fileID]; ok {
		return sh, nil
	}
	if !s.sizes[key.size] {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh, ok := s.seen[key]; ok {
		return sh, nil
	}
	sum, err := hashFile(f)
	if err != nil {
		return "", err
	}
	s.seen[key] = s.sums[sum]
	return s.sums[sum], nil
}

func keyOf(f *os.File) (fileKey, bool) {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return fileKey{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{fileID: fileID{dev: uint64(sys.Dev), ino: sys.Ino}, size: st.Size(),
		mtime: st.ModTime().UnixNano(), ctime: sys.Ctim.Nano()}, true
}

func hashFile(f *os.File) ([32]byte, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return [32]byte{}, err
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// shellGuard is one plugin session's exec rule (session.Options.ExecVeto):
// the session's first exec is the entry's, and when the entry is a script
// the next is its #! interpreter; that interpreter may be a shell, once.
// Any other exec of a shell, by whatever name (sh -c, bash -c, a system()
// from another interpreter, the entry's shell run again, the entry run
// again when it is itself a shell), ends the session. The kernel wall
// cannot say this: it lets a file execute or not, never "only once".
type shellGuard struct {
	p      *Plugin
	shells *Shells
	mu     sync.Mutex
	execs  int
	pid    uint32 // the entry's process
}

func newShellGuard(p *Plugin) *shellGuard { return &shellGuard{p: p, shells: HostShells()} }

// check is the veto: "" lets the exec be, else why the session ends.
func (g *shellGuard) check(ev event.Event) string {
	g.mu.Lock()
	g.execs++
	n := g.execs
	if n == 1 {
		g.pid = ev.PID
	}
	g.mu.Unlock()
	path := ev.Triple.Path
	if n == 1 && path == g.p.EntryPath {
		return "" // the entry itself, whatever it is
	}
	sh, err := g.shells.Is(path)
	switch {
	case err != nil:
		return fmt.Sprintf("plugin %s executed %s, which klock could not check for a shell (%v): a plugin launches no shell (seed 004 §8.3)", g.p.Name, path, err)
	case sh == "":
		return ""
	case n == 2 && ev.PID == g.pid && g.p.Interpreter != "" && path == g.p.Interpreter:
		return "" // the entry's #! interpreter, as the kernel starts it
	}
	what := path
	if sh != path {
		what += ", a copy or link of " + sh
	}
	return fmt.Sprintf("plugin %s launched a shell (%s): a plugin launches no shell but its entry's interpreter, once (seed 004 §8.3)", g.p.Name, what)
}
