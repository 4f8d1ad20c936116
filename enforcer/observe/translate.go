//go:build linux && (amd64 || arm64)

package observe

import (
	"bytes"
	"net/netip"
	"time"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

const (
	atSymlinkNofollow = 0x100
	atSymlinkFollow   = 0x400
	atEmptyPath       = 0x1000
	renameNoreplace   = 1
	renameExchange    = 2
	oTmpfile          = unix.O_TMPFILE &^ unix.O_DIRECTORY
)

// translate turns one kernel record into the Records it means (an exec of a
// script means two). clock converts the record's boot-time stamp.
// inRoot is the Watch's own root (InOwnRoot), nil for the observer's.
func (o *Observer) translate(r *raw, inRoot *ownRoot, emit func(Record)) {
	t := o.newTranslation(r, inRoot, emit)
	t.rec.NameReread = o.rereadFaulted(r)
	nofollow := r.flags&atSymlinkNofollow != 0

	switch r.op {
	case opOpen:
		o.translateOpen(r, &t.rec, t.obj, t.hasObj, t.req(r.path0, r.dirfd, r.flags&unix.O_NOFOLLOW == 0), t.out)
	case opMkdir, opMknod:
		t.fileEvent(policy.Provides, false)
	case opUnlink, opRmdir:
		t.fileEvent(policy.Deletes, false)
	case opTruncate:
		t.fileEvent(policy.Mutates, true)
	case opIoctl:
		// A metadata ioctl (internal/metaioctl): MUTATES of the
		// descriptor's file, named by the kernel as for fchmod, so a
		// strict kill's rollback knows the file was touched.
		t.fileEvent(policy.Mutates, true)
	case opChmod, opChown, opUtimes, opXattr:
		// Metadata changes have no kernel wall (Landlock does not mediate
		// them): the path is the only thing judged. Say when a relative
		// name's base could not be verified, i.e. the agent may have moved
		// its cwd or directory before the name was resolved.
		t.rec.MetadataUnverified = r.ret >= 0 && len(r.path0) > 0 && r.path0[0] != '/'
		// An absolute name, unless through /proc (its fd links are
		// resolved as the fd is by then, and a program's
		// /proc/self/fd/N/name calls must not kill a strict session:
		// the residual race of a reused fd number is in the package doc).
		t.metaByName = r.ret >= 0 && len(r.path0) > 0 && r.path0[0] == '/' && !bytes.HasPrefix(r.path0, []byte("/proc/"))
		t.fileEvent(policy.Mutates, !nofollow)
	case opSymlink:
		t.symlink()
	case opLink:
		t.link()
	case opRename:
		t.rename()
	case opExec:
		o.translateExec(r, &t.rec, t.obj, t.hasObj, t.req, t.out)
	case opConnect, opSendto, opBind, opListen:
		t.net()
	case opSocket:
		t.rec.Event.Triple = policy.RawSocketTriple()
		t.out(t.rec)
	case opIOUring, opCompat:
		t.rec.Kind = KindUnobserved
		t.out(t.rec)
	case opFork:
		t.rec.Kind = KindFork
		t.rec.PPID = r.ppid
		o.res.forked(r.pid, r.ppid)
		t.out(t.rec)
	case opExit:
		t.rec.Kind = KindExit
		t.rec.ExitStatus = r.exitCode
		t.out(t.rec)
	}
}

// translation is one kernel record being translated: the record, the
// Record it becomes (its event's common fields filled), its inode, and
// where the Records go. Each op's translation is a method.
type translation struct {
	o      *Observer
	r      *raw
	inRoot *ownRoot
	emit   func(Record)
	rec    Record
	obj    ident
	hasObj bool
	// metaByName: a metadata change that took effect on an absolute
	// name (fileEvent checks whether resolving it went through a link).
	metaByName bool
}

// newTranslation starts translating r: the event's time, process,
// syscall and errno (EACCES and EPERM are a block), and its inode. A
// value, not a pointer: it stays on translate's stack (one per record).
func (o *Observer) newTranslation(r *raw, inRoot *ownRoot, emit func(Record)) translation {
	base := event.Event{
		Time:    o.clock(r.ts),
		Source:  event.SourceTracepoint,
		PID:     r.pid,
		TID:     r.tid,
		Comm:    r.comm,
		Syscall: syscallName(r),
	}
	switch {
	case interrupted(r.ret):
		// Reported only if the call is not run again: the program got
		// EINTR (interrupted.go).
		base.Errno = eintr
	case r.ret < 0:
		base.Errno = int32(-r.ret)
		base.Blocked = base.Errno == int32(unix.EACCES) || base.Errno == int32(unix.EPERM)
	}
	t := translation{o: o, r: r, inRoot: inRoot, emit: emit, rec: Record{Kind: KindEvent, CgroupID: r.cgid, Event: base}}
	t.obj = kident(r.dev, r.ino)
	t.hasObj = r.kflags&fIno != 0
	if t.hasObj {
		t.rec.Ino, t.rec.Dev = t.obj.ino, t.obj.dev
	}
	return t
}

// out emits rec. A name read again from the process was not the kernel's
// copy: whatever resolved it says no more than best effort, unless an
// inode the kernel recorded confirmed it. Paths in a session's procfs
// (resolved from an fd they read as /proc/<host or namespace pid>) are the
// session's own processes: report them as /proc/self so intents can name
// them.
func (t *translation) out(rec Record) {
	if rec.NameReread && !t.hasObj {
		rec.Path, rec.ExtraPath = unverified(rec.Path), unverified(rec.ExtraPath)
	}
	// A faulted name read again in vain: unread when a name the record
	// reports is missing (an open still has the kernel's path of what it
	// opened).
	ev := &rec.Event
	ev.NameUnread = rereadOp(t.r.op) && t.r.kflags&(fFault0|fFault1) != 0 &&
		(ev.Triple.Path == "" || ev.Extra.Type == policy.ObjFile && ev.Extra.Path == "")
	rec.Event.Triple.Path = sessionProc(rec.Event.Triple.Path)
	rec.Event.Extra.Path = sessionProc(rec.Event.Extra.Path)
	t.emit(rec)
}

// req is the resolver's request for the op's first path, relative to
// dirfd, with the base directory the kernel saw for it.
func (t *translation) req(p []byte, dirfd int32, follow bool) pathReq {
	r := t.r
	return pathReq{pid: r.pid, dirfd: dirfd, path: string(p), follow: follow,
		base: kident(r.baseDev, r.baseIno), hasBase: r.kflags&fBase != 0, kbase: r.kbase, inRoot: t.inRoot}
}

// req2 is req for the op's second path (link, rename, symlink).
func (t *translation) req2(p []byte, dirfd int32, follow bool) pathReq {
	r := t.r
	return pathReq{pid: r.pid, dirfd: dirfd, path: string(p), follow: follow,
		base: kident(r.b2Dev, r.base2), hasBase: r.kflags&fBase2 != 0, inRoot: t.inRoot}
}

// file resolves the op's single path: an fd argument, or a string.
func (t *translation) file(follow bool) (string, PathSource) {
	r, rv, obj, hasObj := t.r, t.o.res, t.obj, t.hasObj
	if r.kflags&fFDPath != 0 {
		return t.fdFile()
	}
	if r.kflags&fFault0 != 0 {
		// The string could not be read; a path-based metadata call's
		// inode the ctime hooks caught still has the kernel's path.
		if hasObj && r.kflags&fKPathSB != 0 {
			if kp, ok := rv.sbPath(r.pid, t.inRoot, obj, r.kpath); ok {
				rv.name(obj, kp)
				return kp, PathKernel
			}
		}
		return "", PathNone
	}
	q := t.req(r.path0, r.dirfd, follow)
	if len(r.path0) == 0 && r.flags&atEmptyPath == 0 {
		return "", PathNone // "" without AT_EMPTY_PATH is ENOENT
	}
	// A path-based metadata call whose inode the ctime hooks caught:
	// the kernel's path of it at the syscall's exit is the name the
	// call used, whatever has been renamed since (sbName).
	if hasObj && r.kflags&fKPathSB != 0 {
		if kp, ok := rv.sbName(r.pid, t.inRoot, obj, r.kpath, cleanAbsName(string(r.path0))); ok {
			rv.name(obj, kp)
			return kp, PathKernel
		}
	}
	// Otherwise the string must still lead to it.
	q.obj, q.hasObj, q.goneOK = obj, hasObj, true
	p, src := rv.resolve(q)
	if src == PathBestEffort && hasObj && r.kflags&fKPathSB != 0 {
		// The name no longer leads to the inode the kernel changed
		// (a swapped symlink, or the process has moved its cwd or
		// the dirfd's directory since): the kernel's own path of
		// that inode, placed on the mount that holds it and checked
		// there with an lstat that must find the same inode.
		if kp, ok := rv.sbPath(r.pid, t.inRoot, obj, r.kpath); ok {
			rv.name(obj, kp)
			return kp, PathKernel
		}
	}
	return p, src
}

// fdFile resolves the op's fd argument: the kernel's path of its file,
// its /proc fd link, or the inode's last verified name.
func (t *translation) fdFile() (string, PathSource) {
	r, rv, obj, hasObj := t.r, t.o.res, t.obj, t.hasObj
	if r.kflags&fKPath != 0 {
		// The kernel's own path of the fd's file, at sys_exit.
		if hasObj {
			rv.name(obj, r.kpath)
		}
		return r.kpath, PathKernel
	}
	if hasObj {
		if p, ok := fdPath(r.pid, r.fd, obj); ok {
			rv.name(obj, p)
			return p, PathKernel
		}
		// The fd is gone already: the inode's last verified name.
		if p, ok := rv.byInode(obj); ok {
			return p, PathVerified
		}
	}
	return "", PathNone
}

// fileEvent emits the op on its single path as pred.
func (t *translation) fileEvent(pred policy.Predicate, follow bool) {
	r := t.r
	p, src := t.file(follow)
	if r.unnamed && r.kflags&fFDPath != 0 {
		// An fd whose file has no name left: whatever name it had
		// is another file's now, or nobody's. Named for the log.
		t.rec.Event.Unnamed = true
		if p == "" {
			p = "(an unnamed file)"
		} else {
			p += " (deleted)"
		}
	}
	t.rec.Arg = string(r.path0)
	t.rec.Path = src
	if t.metaByName && p != cleanAbs(string(r.path0)) {
		// The absolute name led through a symlink (or ".."): what it
		// points at now need not be what the kernel changed (a link
		// swapped after the call), and nothing verified it.
		t.rec.MetadataUnverified = true
	}
	t.rec.MetadataUnverified = t.rec.MetadataUnverified && src == PathBestEffort
	t.rec.Event.Triple = policy.FileTriple(pred, p)
	t.out(t.rec)
}

// symlink emits a symlink's new name (PROVIDES). path0 is the link's
// content, not a path the kernel touched.
func (t *translation) symlink() {
	r := t.r
	p, src := t.o.res.resolve(t.req2(r.path1, r.dirfd2, false))
	t.rec.Arg, t.rec.Path = string(r.path1), src
	t.rec.Event.Triple = policy.FileTriple(policy.Provides, p)
	t.out(t.rec)
}

// link emits a hard link's new name (PROVIDES), with the old name as
// its extra (CONSUMES).
func (t *translation) link() {
	r, rv := t.r, t.o.res
	np, nsrc := rv.resolve(t.req2(r.path1, r.dirfd2, false))
	op, osrc := rv.resolve(t.req(r.path0, r.dirfd, r.flags&atSymlinkFollow != 0))
	t.rec.Arg, t.rec.Path, t.rec.ExtraPath = string(r.path1), nsrc, osrc
	t.rec.Event.Triple = policy.FileTriple(policy.Provides, np)
	// The new name gives access to the old inode: name it.
	t.rec.Event.Extra = policy.FileTriple(policy.Consumes, op)
	t.out(t.rec)
}

// rename emits a rename of the source (RENAMES), with the destination
// as its extra: MUTATES (exchanged or replaced) or PROVIDES (noreplace).
func (t *translation) rename() {
	r, rv := t.r, t.o.res
	sp, ssrc := rv.resolve(t.req(r.path0, r.dirfd, false))
	dp, dsrc := rv.resolve(t.req2(r.path1, r.dirfd2, false))
	t.rec.Arg, t.rec.Path, t.rec.ExtraPath = string(r.path0), ssrc, dsrc
	t.rec.Event.Triple = policy.FileTriple(policy.Renames, sp)
	switch {
	case r.flags&renameExchange != 0:
		t.rec.Event.Extra = policy.FileTriple(policy.Mutates, dp)
	case r.flags&renameNoreplace != 0:
		t.rec.Event.Extra = policy.FileTriple(policy.Provides, dp)
	default:
		// Whether dst existed is gone by sys_exit: fail closed.
		t.rec.Event.Extra = policy.FileTriple(policy.Mutates, dp)
		t.rec.ReplaceUnknown = true
	}
	t.out(t.rec)
}

// net emits a socket address op: connect and send CONSUME, bind and
// listen PROVIDE. A unix-domain address is translateUnix's; an ICMP or
// raw socket's send is NET:raw; otherwise a NET triple of address, port
// and protocol.
func (t *translation) net() {
	r := t.r
	pred := policy.Consumes
	if r.op == opBind || r.op == opListen {
		pred = policy.Provides
	}
	if r.family == unix.AF_UNIX {
		t.o.translateUnix(r, &t.rec, pred, t.req, t.out)
		return
	}
	if r.kflags&fAddr == 0 {
		return
	}
	var a netip.Addr
	if r.family == unix.AF_INET {
		a = netip.AddrFrom4([4]byte(r.addr[:4]))
	} else {
		a = netip.AddrFrom16(r.addr)
	}
	if r.kflags&fSock != 0 && pred == policy.Consumes && (r.sotype == unix.SOCK_RAW || r.proto == unix.IPPROTO_ICMP || r.proto == unix.IPPROTO_ICMPV6) {
		// A ping (ICMP datagram) or raw socket's send is no TCP or
		// UDP flow to a port: it is the NET:raw object, as
		// cgroup-net and bpf-lsm judge its socket.
		t.rec.Event.Triple = policy.RawSocketTriple()
		t.out(t.rec)
		return
	}
	proto := policy.ProtoAny
	if r.kflags&fSock != 0 {
		switch r.sotype {
		case unix.SOCK_STREAM:
			proto = policy.ProtoTCP
		case unix.SOCK_DGRAM:
			proto = policy.ProtoUDP
		}
	}
	port := r.port
	if pred == policy.Provides && r.kflags&fEphemeral != 0 {
		// The process asked for any port; the kernel's choice is
		// not part of what it did, and a manifest declares such a
		// bind as port 0.
		port = 0
	}
	t.rec.Event.Triple = policy.NetTriple(pred, netip.AddrPortFrom(a, port), proto)
	t.out(t.rec)
}

func (o *Observer) translateOpen(r *raw, rec *Record, obj ident, hasObj bool, q pathReq, out func(Record)) {
	acc := r.flags & unix.O_ACCMODE
	write := acc == unix.O_WRONLY || acc == unix.O_RDWR || r.flags&unix.O_TRUNC != 0
	created := r.kflags&fCreated != 0
	rec.Arg = string(r.path0)
	var p string
	var src PathSource
	if r.ret >= 0 && r.kflags&fKPath != 0 {
		// The kernel's own path of the file it opened (its struct path
		// walked at sys_exit): no later symlink swap or unlink changes it.
		p, src = r.kpath, PathKernel
		if hasObj && r.flags&unix.O_DIRECTORY != 0 {
			o.res.remember(obj, p)
		}
	}
	if src == PathNone && r.ret >= 0 && hasObj && len(r.path0) > 0 && r.path0[0] == '/' {
		// Seen before, same inode: no need to ask /proc.
		if v, ok := o.res.objs[objKey{string(r.path0), q.follow}]; ok && v.id == obj {
			p, src = v.path, PathVerified
		}
	}
	if src == PathNone && r.ret >= 0 && hasObj {
		if fp, ok := fdPath(r.pid, int32(r.ret), obj); ok {
			p, src = fp, PathKernel
			if r.flags&unix.O_DIRECTORY != 0 {
				o.res.remember(obj, fp)
			}
		}
	}
	if src == PathNone && r.kflags&fFault0 == 0 && (len(r.path0) > 0 || r.flags&atEmptyPath != 0) {
		q.obj, q.hasObj = obj, hasObj
		p, src = o.res.resolve(q)
	}
	if r.ret >= 0 && (src == PathKernel || src == PathVerified) {
		o.res.opened(r.pid, int32(r.ret), p)
	}
	pred := policy.Consumes
	switch {
	case r.flags&oTmpfile == oTmpfile:
		pred = policy.Provides // an unnamed file in the directory p
		rec.Event.Tmpfile = true
		p = tmpfileDir(p)
	case created:
		pred = policy.Provides
	case r.ret < 0 && r.flags&unix.O_CREAT != 0:
		// Refused: did it ask to create, or to write an existing file?
		var st unix.Stat_t
		if p != "" && unix.Lstat(p, &st) != nil {
			pred = policy.Provides
		} else if write {
			pred = policy.Mutates
		}
	case write:
		pred = policy.Mutates
	}
	if hasObj && r.ret >= 0 && (src == PathKernel || src == PathVerified) {
		o.res.name(obj, p)
	}
	rec.Path = src
	rec.Event.Triple = policy.FileTriple(pred, p)
	out(*rec)
}

func (o *Observer) translateExec(r *raw, rec *Record, obj ident, hasObj bool, req func([]byte, int32, bool) pathReq, out func(Record)) {
	emit := func(p string, src PathSource, arg string) {
		rec.Arg, rec.Path, rec.ExtraPath = arg, src, src
		rec.Event.Triple = policy.ExecTriple(p)
		rec.Event.Extra = policy.FileTriple(policy.Consumes, p)
		out(*rec)
	}
	if r.nr >= 0 { // a failed execve/execveat, from sys_exit
		p, src := o.res.resolve(req(r.path0, r.dirfd, true))
		emit(p, src, string(r.path0))
		return
	}
	// sched_process_exec: path0 is the kernel's copy of the name, path1 the
	// interpreter a #! line named (scripts); the inode is the binary loaded.
	// The kernel's name of the file loaded, taken at the exec (not a
	// script): the name the process passed may not name it (an fd through
	// /proc/self/fd/N), and /proc/<pid>/exe is gone once it has exited.
	script := len(r.path1) > 0 && string(r.path1) != string(r.path0)
	if r.kpath != "" && !script {
		emit(r.kpath, PathKernel, string(r.path0))
		return
	}
	exe, exeOK := "", false
	if hasObj {
		exe, exeOK = fdPathExe(r.pid, obj)
	}
	if script || !exeOK {
		q := req(r.path0, atFDCWD, true)
		if !script {
			q.obj, q.hasObj = obj, hasObj
		}
		p, src := o.res.resolve(q)
		emit(p, src, string(r.path0))
		if !script {
			return
		}
	}
	if exeOK {
		emit(exe, PathKernel, string(r.path1))
	} else if script {
		q := req(r.path1, atFDCWD, true)
		q.obj, q.hasObj, q.base, q.hasBase, q.kbase = obj, hasObj, ident{}, false, ""
		p, src := o.res.resolve(q)
		emit(p, src, string(r.path1))
	}
}

func fdPathExe(pid uint32, want ident) (string, bool) {
	p, id, ok := readMagic(procPath(pid, "exe"))
	if !ok || id != want {
		return "", false
	}
	return p, true
}

// translateUnix maps unix-domain addresses: a path names a socket file
// (connect/send: CONSUMES FILE, bind: PROVIDES FILE); an abstract name has
// no file and is reported as NET with Host "@name".
func (o *Observer) translateUnix(r *raw, rec *Record, pred policy.Predicate, req func([]byte, int32, bool) pathReq, out func(Record)) {
	name := r.path0
	if len(name) == 0 {
		return
	}
	if name[0] == 0 {
		rec.Event.Triple = policy.Triple{Predicate: pred, Type: policy.ObjNet, Host: "@" + string(trimNUL(name[1:]))}
		out(*rec)
		return
	}
	name = trimNUL(name)
	rec.Arg = string(name)
	p, src := o.res.resolve(req(name, atFDCWD, pred != policy.Provides))
	rec.Path = src
	rec.Event.Triple = policy.FileTriple(pred, p)
	out(*rec)
}

// bootClock converts CLOCK_BOOTTIME nanoseconds (bpf_ktime_get_boot_ns) to
// wall time.
type bootClock struct{ offset time.Duration }

func newBootClock() bootClock {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	now := time.Now()
	return bootClock{offset: time.Duration(now.UnixNano() - ts.Nano())}
}

func (c bootClock) at(ns uint64) time.Time { return time.Unix(0, int64(ns)+int64(c.offset)) }

// tmpfileDir is the directory of an O_TMPFILE open: the kernel's walk of
// the new file's dentry names it "#<inode>" in that directory (d_tmpfile),
// a name no other run's file will have and nothing can open.
func tmpfileDir(p string) string {
	dir, name := splitLast(p)
	if len(name) < 2 || name[0] != '#' || !allDigits(name[1:]) || dir == "." {
		return p
	}
	return dir
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
