//go:build linux && (amd64 || arm64)

package observe

import (
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/nshelper"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// PathSource says how an event's path was obtained, strongest first.
type PathSource uint8

const (
	// PathNone: the triple has no path (NET), or none could be formed.
	PathNone PathSource = iota
	// PathKernel: the kernel's own path of the object, walked by the BPF
	// program at sys_exit (the file an open returned, the fd of an f* call;
	// for a path-based metadata call, the inode it changed placed on a
	// mount and checked), or read from the kernel's own object
	// (/proc/<pid>/fd/<n> of the fd the syscall returned or used,
	// /proc/<pid>/exe after an exec) whose inode matched the one the BPF
	// program recorded.
	PathKernel
	// PathVerified: the string the process passed, resolved in user space
	// (dirfd or cwd, then every symlink, by the kernel through an O_PATH
	// open), and checked: the resolved object's inode matched the kernel's
	// record, or, for a name that no longer or not yet exists, the base
	// directory's inode did.
	PathVerified
	// PathBestEffort: resolved after the fact with nothing to check it
	// against (an absolute path to a name that is gone), or a check failed
	// (the process exited, changed directory, closed or reused the fd, or a
	// symlink on the path changed in between). The path is still the best
	// answer available; decide on it knowing that.
	PathBestEffort
)

func (p PathSource) String() string {
	return [...]string{"none", "kernel", "verified", "best-effort"}[p]
}

// ident names an inode with the user-space dev_t encoding (stat's st_dev).
type ident struct {
	dev, ino uint64
}

// kident converts the kernel's s_dev (MAJOR<<20 | MINOR) to stat's encoding.
func kident(kdev uint32, ino uint64) ident {
	return ident{dev: unix.Mkdev(kdev>>20, kdev&0xfffff), ino: ino}
}

func statIdent(st *unix.Stat_t) ident { return ident{dev: st.Dev, ino: st.Ino} }

const maxDirCache = 4096

// resolver turns path strings into absolute, symlink-free paths. It is used
// by the reader goroutine only.
type resolver struct {
	// dirs maps a directory inode to its path. Directories have one name
	// (no hard links), so a base dir the kernel named by inode resolves
	// without /proc when it was seen before; every hit is re-checked with a
	// stat (a renamed directory misses and is looked up again).
	dirs map[ident]string
	// parent maps a pid to its parent (from fork records): when a
	// short-lived process is gone, an ancestor often still has the same cwd.
	parent map[uint32]uint32
	// objs caches what an absolute path string resolved to, with the
	// inode found there. It is used only when the kernel recorded the
	// object's inode and it equals the cached one (the string still leads
	// to that inode, which has that name): no syscall at all for the common
	// case of a program opening the same files again.
	objs map[objKey]objVal
	// parents caches a directory string's resolution with its inode; a hit
	// costs one stat of the string to check it still leads there.
	parents map[string]objVal
	// names maps an object's inode to the last verified path it was seen
	// at. An f* call (futimens, fchmod, ...) names its object by fd, and
	// the fd is often closed before /proc can be read (tar sets times and
	// closes at once); the inode then still names the file, and a stat of
	// the remembered path proves it still leads there.
	names map[ident]string
	// mounts caches each agent mount namespace's table (sbname.go).
	mounts map[string][]mountEnt
	// fds names what each process's descriptors were opened on, from the
	// open records in the order the kernel wrote them: a path written
	// through /proc/self/fd/N names N's file as it was at that record,
	// whatever the process closed or reused N for before the reader got
	// there (procSelf). Descriptors made otherwise (dup, a socket) are not
	// in it: /proc tells then.
	fds map[pidFD]string
	// gen counts forgets (watches re-seed their KnownDirs after one).
	gen uint64
}

const maxNameCache = 1 << 16

// name records where a verified object was seen.
func (rv *resolver) name(id ident, p string) {
	if p == "" || !strings.HasPrefix(p, "/") {
		return
	}
	if len(rv.names) >= maxNameCache {
		clear(rv.names)
	}
	rv.names[id] = p
}

// byInode names an object by its inode from an earlier verified sighting,
// re-checked with an lstat (the name may have moved or been reused).
func (rv *resolver) byInode(id ident) (string, bool) {
	p, ok := rv.names[id]
	if !ok {
		return "", false
	}
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil || statIdent(&st) != id {
		delete(rv.names, id)
		return "", false
	}
	return p, true
}

type objKey struct {
	full   string
	follow bool
}

type objVal struct {
	path string
	id   ident
}

const maxObjCache = 1 << 15

func (rv *resolver) cacheObj(k objKey, v objVal) {
	if len(rv.objs) >= maxObjCache {
		clear(rv.objs)
	}
	rv.objs[k] = v
}

func newResolver() *resolver {
	return &resolver{dirs: make(map[ident]string), parent: make(map[uint32]uint32),
		objs: make(map[objKey]objVal), parents: make(map[string]objVal), names: make(map[ident]string),
		mounts: make(map[string][]mountEnt), fds: make(map[pidFD]string)}
}

type pidFD struct {
	pid uint32
	fd  int32
}

const maxFDCache = 1 << 16

// opened records that pid's open returned fd on p (a kernel or verified
// path).
func (rv *resolver) opened(pid uint32, fd int32, p string) {
	if len(rv.fds) >= maxFDCache {
		clear(rv.fds)
	}
	rv.fds[pidFD{pid, fd}] = p
}

// fdAt names pid's fd by the open records, its own or, for a descriptor it
// inherited, its ancestors'.
func (rv *resolver) fdAt(pid uint32, fd int32) (string, bool) {
	for i := 0; i < 8 && pid > 1; i, pid = i+1, rv.parent[pid] {
		if p, ok := rv.fds[pidFD{pid, fd}]; ok {
			return p, true
		}
	}
	return "", false
}

// forget drops every cache keyed by inode or pid (see Observer.forget).
func (rv *resolver) forget() {
	rv.gen++
	clear(rv.dirs)
	clear(rv.parent)
	clear(rv.objs)
	clear(rv.parents)
	clear(rv.names)
	clear(rv.mounts)
	clear(rv.fds)
}

func (rv *resolver) forked(child, parent uint32) {
	if len(rv.parent) >= 1<<16 {
		clear(rv.parent)
	}
	rv.parent[child] = parent
}

func procPath(pid uint32, rest string) string {
	return "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/" + rest
}

func fdLink(pid uint32, fd int32) string {
	if fd == atFDCWD {
		return procPath(pid, "cwd")
	}
	return procPath(pid, "fd/"+strconv.FormatInt(int64(fd), 10))
}

const atFDCWD = -100

// link reads a /proc magic link and stats what it points to. ok is false
// when the link is gone.
func readMagic(link string) (string, ident, bool) {
	p, err := os.Readlink(link)
	if err != nil {
		return "", ident{}, false
	}
	var st unix.Stat_t
	if err := unix.Stat(link, &st); err != nil {
		return "", ident{}, false
	}
	return strings.TrimSuffix(p, " (deleted)"), statIdent(&st), true
}

// base returns the directory a relative path of pid starts from (dirfd or
// cwd). verified is true when its inode matched want.
func (rv *resolver) base(pid uint32, dirfd int32, want ident, have bool) (string, bool) {
	if have {
		if p, ok := rv.dirs[want]; ok {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && statIdent(&st) == want {
				return p, true
			}
		}
	}
	p, id, ok := readMagic(fdLink(pid, dirfd))
	if !ok && have && dirfd == atFDCWD {
		// The process is gone: try its ancestors' cwd (same inode only).
		for i, a := 0, rv.parent[pid]; i < 8 && a > 1; i, a = i+1, rv.parent[a] {
			if ap, aid, aok := readMagic(fdLink(a, atFDCWD)); aok && aid == want {
				rv.remember(want, ap)
				return ap, true
			}
		}
	}
	if !ok {
		if have {
			// The process or its fd is gone. A directory seen before under
			// this inode (perhaps removed since) is the best answer left.
			if p, ok := rv.dirs[want]; ok {
				return p, false
			}
		}
		return "", false
	}
	if !have || id != want {
		return p, false
	}
	rv.remember(want, p)
	return p, true
}

// remember records a directory's path under its inode.
func (rv *resolver) remember(id ident, p string) {
	if len(rv.dirs) >= maxDirCache {
		clear(rv.dirs)
		rv.gen++ // seeds went too
	}
	rv.dirs[id] = p
}

// kresolve lets the kernel resolve an absolute path now: an O_PATH open
// (following the last component or not), then the path of what it opened.
// When the object does not exist, the parent is resolved and the last
// component appended. found reports whether the object itself was opened.
func (rv *resolver) kresolve(full string, follow bool) (path string, id ident, isDir, found bool) {
	return kresolveWith(full, follow, openResolveMode, rv.parentDir)
}

// kresolveWith is kresolve with its open (the object itself, as the
// kernel resolves it) and its parent lookup (for a name that does not
// exist) given: the observer's root, or a container's (ownRoot).
func kresolveWith(full string, follow bool, open func(p string, flags int) (string, ident, uint32, bool), parentDir func(dir string) (string, bool)) (path string, id ident, isDir, found bool) {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	if p, id, mode, ok := open(full, flags); ok {
		return p, id, mode&unix.S_IFMT == unix.S_IFDIR, true
	}
	dir, file := splitLast(full)
	if file == "" || file == "." || file == ".." {
		return cleanAbs(full), ident{}, false, false
	}
	if p, ok := parentDir(dir); ok {
		if p == "/" {
			return "/" + file, ident{}, false, false
		}
		return p + "/" + file, ident{}, false, false
	}
	return cleanAbs(full), ident{}, false, false
}

func (rv *resolver) parentDir(dir string) (string, bool) {
	if v, ok := rv.parents[dir]; ok {
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil && statIdent(&st) == v.id {
			return v.path, true
		}
	}
	p, id, ok := openResolve(dir, unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY)
	if !ok {
		return "", false
	}
	if len(rv.parents) >= maxObjCache {
		clear(rv.parents)
	}
	rv.parents[dir] = objVal{p, id}
	return p, true
}

func openResolve(p string, flags int) (string, ident, bool) {
	r, id, _, ok := openResolveMode(p, flags)
	return r, id, ok
}

func openResolveMode(p string, flags int) (string, ident, uint32, bool) {
	fd, err := unix.Open(p, flags, 0)
	if err != nil {
		return "", ident{}, 0, false
	}
	return nameFD(fd)
}

// nameFD reads back (and closes) an O_PATH descriptor: the kernel's path
// of what it opened, its inode and mode.
func nameFD(fd int) (string, ident, uint32, bool) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", ident{}, 0, false
	}
	r, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", ident{}, 0, false
	}
	return r, statIdent(&st), st.Mode, true
}

// splitLast splits off the last component, ignoring trailing slashes.
func splitLast(p string) (dir, file string) {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

func cleanAbs(p string) string {
	// Lexical cleaning is only a fallback (it is wrong across symlinks,
	// which is why kresolve asks the kernel first).
	if !strings.HasPrefix(p, "/") {
		return p
	}
	parts := strings.Split(p, "/")
	out := make([]string, 0, len(parts))
	for _, s := range parts {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

// pathReq is one path argument to resolve.
type pathReq struct {
	pid     uint32
	dirfd   int32
	path    string
	follow  bool
	base    ident
	hasBase bool
	// kbase is the kernel's own path of the base directory, walked at
	// sys_exit ("": not given; the base is read back from /proc).
	kbase  string
	obj    ident // the object's inode when the kernel recorded it
	hasObj bool
	// goneOK: a name that no longer exists is judged by its base
	// directory as if no inode were known (path-based metadata calls,
	// whose inode the ctime hooks catch: a temp file renamed away right
	// after its chmod is not a mismatch); only another inode found at the
	// name is.
	goneOK bool
	// inRoot: resolve inside /proc/<pid>/root (Watch InOwnRoot); nil:
	// in the observer's root.
	inRoot *ownRoot
}

// resolve returns the absolute, symlink-resolved path the kernel acted on,
// as well as it can be known after the fact, and how it was obtained.
func (rv *resolver) resolve(q pathReq) (string, PathSource) {
	var full string
	baseOK := true // a relative path's base directory was verified
	q.path = selfFD(q.path)
	switch {
	case q.path == "/proc" || strings.HasPrefix(q.path, "/proc/"):
		// The agent's /proc is its own procfs (its pid namespace): resolving
		// the string through the observer's /proc would name other processes.
		p := sessionProc(cleanAbs(q.path))
		real, ok := rv.procSelf(q, p)
		if !ok {
			return p, PathBestEffort
		}
		full = real
	case strings.HasPrefix(q.path, "/"):
		full = q.path
	default:
		b, ok := q.kbase, q.kbase != ""
		if ok {
			if q.hasBase {
				rv.remember(q.base, b)
			}
		} else {
			b, ok = rv.base(q.pid, q.dirfd, q.base, q.hasBase)
		}
		if b == "" {
			if q.path == "" {
				return "", PathNone
			}
			return q.path, PathBestEffort // no base any more: a relative path, fails closed
		}
		baseOK = ok
		if q.path == "" { // AT_EMPTY_PATH: the dirfd's object itself
			if ok {
				return b, PathKernel
			}
			return b, PathBestEffort
		}
		if b == "/" {
			full = "/" + q.path
		} else {
			full = b + "/" + q.path
		}
		if q.kbase != "" && !q.hasObj && !q.follow && q.path != "." && q.path != ".." && !strings.Contains(q.path, "/") {
			// One name in the directory the kernel walked, whose last
			// component is not followed (mkdir, unlink, rmdir, mknod...):
			// that is the object, with nothing left to resolve.
			return full, PathVerified
		}
	}
	key := objKey{full, q.follow}
	if q.hasObj {
		if v, ok := rv.objs[key]; ok && v.id == q.obj {
			rv.name(v.id, v.path)
			return v.path, PathVerified
		}
	}
	var p string
	var id ident
	var isDir, found bool
	if q.inRoot != nil {
		p, id, isDir, found = q.inRoot.kresolve(q.pid, full, q.follow)
	} else {
		p, id, isDir, found = rv.kresolve(full, q.follow)
	}
	if found && !strings.HasPrefix(p, "/") {
		// The walk went through a magic link of the observer's own
		// process (a link the agent made to /proc/self/fd/N): what it
		// names (anon_inode:bpf-prog) is klock's, never the agent's.
		return cleanAbs(full), PathBestEffort
	}
	switch {
	case q.hasObj && found && id == q.obj:
		rv.cacheObj(key, objVal{p, id})
		rv.name(id, p)
		if isDir {
			rv.remember(id, p) // a later *at call may name it by this inode
		}
		return p, PathVerified
	case q.hasObj && (found || !q.goneOK):
		return p, PathBestEffort
	case baseOK && q.hasBase:
		return p, PathVerified
	}
	return p, PathBestEffort
}

// procSelf names, in the agent's own process (q.pid), what a path through
// its /proc/self (p, as SessionProc writes it) leads to: its executable
// (/proc/self/exe: a program running itself again), a directory it holds
// open written as a path (/proc/self/fd/N/NAME, as an *at call's dirfd:
// Claude Code renames through them) or its working directory
// (/proc/self/cwd/NAME). The caller resolves the result as any path. ok
// is false for anything else (the descriptor itself, /proc/self/fd/N, is
// the agent's own: named as it is), and when the process is gone and
// nothing else names its executable.
func (rv *resolver) procSelf(q pathReq, p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, "/proc/self/")
	if !ok {
		return "", false
	}
	if rest == "exe" {
		if q.hasObj {
			// The binary the kernel loaded, named where it was seen.
			if n, ok := rv.byInode(q.obj); ok {
				return n, true
			}
		}
		return absMagic(procPath(q.pid, "exe"))
	}
	link, tail, ok := strings.Cut(rest, "/")
	if !ok || tail == "" {
		return "", false
	}
	var dir string
	switch {
	case link == "cwd":
		dir, ok = absMagic(procPath(q.pid, "cwd"))
	case link == "fd":
		n, name, found := strings.Cut(tail, "/")
		fd, err := strconv.ParseInt(n, 10, 32)
		if !found || name == "" || err != nil {
			return "", false
		}
		tail = name
		if dir, ok = rv.fdAt(q.pid, int32(fd)); !ok {
			dir, ok = absMagic(fdLink(q.pid, int32(fd)))
		}
	default:
		return "", false
	}
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(dir, "/") + "/" + tail, true
}

// absMagic reads a /proc magic link that names a path (not a pipe, socket
// or anonymous inode).
func absMagic(link string) (string, bool) {
	p, _, ok := readMagic(link)
	if !ok || !strings.HasPrefix(p, "/") {
		return "", false
	}
	return p, true
}

// fdPath names the object behind pid's fd via /proc, checked against the
// kernel's inode.
func fdPath(pid uint32, fd int32, want ident) (string, bool) {
	p, id, ok := readMagic(fdLink(pid, fd))
	if !ok || id != want || !strings.HasPrefix(p, "/") {
		return "", false
	}
	return p, true
}

// selfFD names the agent's own descriptors by their procfs name: /dev/fd
// and /dev/std{in,out,err} are links to /proc/self/fd, which the observer
// would follow into its own descriptors (bash's process substitution
// <(...) hands the agent /dev/fd/63: klock's 63 is a BPF program).
func selfFD(p string) string {
	switch p {
	case "/dev/stdin":
		return "/proc/self/fd/0"
	case "/dev/stdout":
		return "/proc/self/fd/1"
	case "/dev/stderr":
		return "/proc/self/fd/2"
	case "/dev/fd":
		return "/proc/self/fd"
	}
	if rest, ok := strings.CutPrefix(p, "/dev/fd/"); ok {
		return "/proc/self/fd/" + rest
	}
	return p
}

// sessionProc is event.SessionProc.
func sessionProc(p string) string { return event.SessionProc(p) }

// kresolve is the resolver's kresolve inside pid's root (its
// /proc/<pid>/root, as the root of an openat2 RESOLVE_IN_ROOT), or, once
// pid is gone, inside its mount namespace's root: what a container's path
// names. The path read back from the descriptor is the container's own
// (the kernel's walk of a mount the observer cannot reach stops at the
// container's root). Nothing is cached by name: another root holds other
// files.
func (r *ownRoot) kresolve(pid uint32, full string, follow bool) (path string, id ident, isDir, found bool) {
	root, err := unix.Open(procPath(pid, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if root, err = r.nsRoot(); err != nil {
			return cleanAbs(full), ident{}, false, false
		}
	}
	defer unix.Close(root)
	open := func(p string, flags int) (string, ident, uint32, bool) {
		rel := strings.TrimLeft(p, "/")
		if rel == "" {
			rel = "."
		}
		fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			return "", ident{}, 0, false
		}
		return nameFD(fd)
	}
	return kresolveWith(full, follow, open, func(dir string) (string, bool) {
		p, _, _, ok := open(dir, unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY)
		return p, ok
	})
}

// ownRoot is a Watch's root of its own (InOwnRoot).
type ownRoot struct {
	ns     *os.File // the mount namespace
	init   uint32   // the container's first process (InOwnRoot)
	helper func() *os.File
	once   sync.Once
	view   *nshelper.View // its root and mount table, opened once (nil until then, or when it failed)
	mu     sync.Mutex     // view.Mountinfo's offset
}

// openView opens the namespace's root and mount table the first time
// either is needed, after the agent ran (not before the runtime's
// pivot_root, when its root was the host's), through nshelper's helper
// process. Nil when that failed.
func (r *ownRoot) openView() *nshelper.View {
	r.once.Do(func() {
		if r.ns == nil {
			return
		}
		if r.helper != nil {
			if bin := r.helper(); bin != nil {
				v, err := nshelper.OpenView(r.ns, nshelper.Binary(bin))
				bin.Close()
				if err == nil {
					r.view = v
					return
				}
				// A helper binary of another build may not know this
				// part: the running binary does the same, only later.
			}
		}
		if v, err := nshelper.OpenView(r.ns); err == nil {
			r.view = v
		}
	})
	return r.view
}

// nsRoot returns a new descriptor of the mount namespace's root: the
// container's root after its pivot_root, for a path of a process that has
// exited.
func (r *ownRoot) nsRoot() (int, error) {
	v := r.openView()
	if v == nil {
		return -1, unix.ENOENT
	}
	return unix.Dup(int(v.Root.Fd()))
}

// nsMountinfo is the namespace's mount table now, as its processes see
// it: for a record of a process that has exited after the container's
// last process did (a short-lived container is gone before the reader
// catches up). Nil when it cannot be read.
func (r *ownRoot) nsMountinfo() []byte {
	v := r.openView()
	if v == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := v.Mountinfo.Seek(0, io.SeekStart); err != nil {
		return nil
	}
	b, err := io.ReadAll(v.Mountinfo)
	if err != nil {
		return nil
	}
	return b
}

// close releases the namespace's root and mount table.
func (r *ownRoot) close() {
	if r.view != nil {
		r.view.Close()
		r.view = nil
	}
}
