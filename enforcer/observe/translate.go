//go:build linux && (amd64 || arm64)

package observe

import (
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
	// Paths in a session's procfs (resolved from an fd they read as
	// /proc/<host or namespace pid>) are the session's own processes:
	// report them as /proc/self so intents can name them.
	out := func(rec Record) {
		rec.Event.Triple.Path = sessionProc(rec.Event.Triple.Path)
		rec.Event.Extra.Path = sessionProc(rec.Event.Extra.Path)
		emit(rec)
	}
	base := event.Event{
		Time:    o.clock(r.ts),
		Source:  event.SourceTracepoint,
		PID:     r.pid,
		TID:     r.tid,
		Comm:    r.comm,
		Syscall: syscallName(r),
	}
	if r.ret < 0 {
		base.Errno = int32(-r.ret)
		base.Blocked = base.Errno == int32(unix.EACCES) || base.Errno == int32(unix.EPERM)
	}
	rec := Record{Kind: KindEvent, CgroupID: r.cgid, Event: base}
	rv := o.res

	req := func(p []byte, dirfd int32, follow bool) pathReq {
		return pathReq{pid: r.pid, dirfd: dirfd, path: string(p), follow: follow,
			base: kident(r.baseDev, r.baseIno), hasBase: r.kflags&fBase != 0, kbase: r.kbase, inRoot: inRoot}
	}
	req2 := func(p []byte, dirfd int32, follow bool) pathReq {
		return pathReq{pid: r.pid, dirfd: dirfd, path: string(p), follow: follow,
			base: kident(r.b2Dev, r.base2), hasBase: r.kflags&fBase2 != 0, inRoot: inRoot}
	}
	obj := kident(r.dev, r.ino)
	hasObj := r.kflags&fIno != 0
	if hasObj {
		rec.Ino, rec.Dev = obj.ino, obj.dev
	}
	// file resolves the op's single path: an fd argument, or a string.
	file := func(follow bool) (string, PathSource) {
		if r.kflags&fFDPath != 0 {
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
		if r.kflags&fFault0 != 0 {
			return "", PathNone
		}
		q := req(r.path0, r.dirfd, follow)
		if len(r.path0) == 0 && r.flags&atEmptyPath == 0 {
			return "", PathNone // "" without AT_EMPTY_PATH is ENOENT
		}
		// A path-based metadata call whose inode the ctime hooks caught:
		// the kernel's path of it at the syscall's exit is the name the
		// call used, whatever has been renamed since (sbName).
		if hasObj && r.kflags&fKPathSB != 0 {
			if kp, ok := rv.sbName(r.pid, inRoot, obj, r.kpath); ok {
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
			if kp, ok := rv.sbPath(r.pid, inRoot, obj, r.kpath); ok {
				rv.name(obj, kp)
				return kp, PathKernel
			}
		}
		return p, src
	}
	fileEvent := func(pred policy.Predicate, follow bool) {
		p, src := file(follow)
		if r.unnamed && r.kflags&fFDPath != 0 {
			// An fd whose file has no name left: whatever name it had
			// is another file's now, or nobody's. Named for the log.
			rec.Event.Unnamed = true
			if p == "" {
				p = "(an unnamed file)"
			} else {
				p += " (deleted)"
			}
		}
		rec.Arg = string(r.path0)
		rec.Path = src
		rec.MetadataUnverified = rec.MetadataUnverified && src == PathBestEffort
		rec.Event.Triple = policy.FileTriple(pred, p)
		out(rec)
	}
	nofollow := r.flags&atSymlinkNofollow != 0

	switch r.op {
	case opOpen:
		o.translateOpen(r, &rec, obj, hasObj, req(r.path0, r.dirfd, r.flags&unix.O_NOFOLLOW == 0), out)
	case opMkdir, opMknod:
		fileEvent(policy.Provides, false)
	case opUnlink, opRmdir:
		fileEvent(policy.Deletes, false)
	case opTruncate:
		fileEvent(policy.Mutates, true)
	case opIoctl:
		// A metadata ioctl (internal/metaioctl): MUTATES of the
		// descriptor's file, named by the kernel as for fchmod, so a
		// strict kill's rollback knows the file was touched.
		fileEvent(policy.Mutates, true)
	case opChmod, opChown, opUtimes, opXattr:
		// Metadata changes have no kernel wall (Landlock does not mediate
		// them): the path is the only thing judged. Say when a relative
		// name's base could not be verified, i.e. the agent may have moved
		// its cwd or directory before the name was resolved.
		rec.MetadataUnverified = r.ret >= 0 && len(r.path0) > 0 && r.path0[0] != '/'
		fileEvent(policy.Mutates, !nofollow)
	case opSymlink:
		// path0 is the link's content, not a path the kernel touched.
		p, src := rv.resolve(req2(r.path1, r.dirfd2, false))
		rec.Arg, rec.Path = string(r.path1), src
		rec.Event.Triple = policy.FileTriple(policy.Provides, p)
		out(rec)
	case opLink:
		np, nsrc := rv.resolve(req2(r.path1, r.dirfd2, false))
		op, osrc := rv.resolve(req(r.path0, r.dirfd, r.flags&atSymlinkFollow != 0))
		rec.Arg, rec.Path, rec.ExtraPath = string(r.path1), nsrc, osrc
		rec.Event.Triple = policy.FileTriple(policy.Provides, np)
		// The new name gives access to the old inode: name it.
		rec.Event.Extra = policy.FileTriple(policy.Consumes, op)
		out(rec)
	case opRename:
		sp, ssrc := rv.resolve(req(r.path0, r.dirfd, false))
		dp, dsrc := rv.resolve(req2(r.path1, r.dirfd2, false))
		rec.Arg, rec.Path, rec.ExtraPath = string(r.path0), ssrc, dsrc
		rec.Event.Triple = policy.FileTriple(policy.Renames, sp)
		switch {
		case r.flags&renameExchange != 0:
			rec.Event.Extra = policy.FileTriple(policy.Mutates, dp)
		case r.flags&renameNoreplace != 0:
			rec.Event.Extra = policy.FileTriple(policy.Provides, dp)
		default:
			// Whether dst existed is gone by sys_exit: fail closed.
			rec.Event.Extra = policy.FileTriple(policy.Mutates, dp)
			rec.ReplaceUnknown = true
		}
		out(rec)
	case opExec:
		o.translateExec(r, &rec, obj, hasObj, req, out)
	case opConnect, opSendto, opBind, opListen:
		pred := policy.Consumes
		if r.op == opBind || r.op == opListen {
			pred = policy.Provides
		}
		if r.family == unix.AF_UNIX {
			o.translateUnix(r, &rec, pred, req, out)
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
			rec.Event.Triple = policy.RawSocketTriple()
			out(rec)
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
		rec.Event.Triple = policy.NetTriple(pred, netip.AddrPortFrom(a, port), proto)
		out(rec)
	case opSocket:
		rec.Event.Triple = policy.RawSocketTriple()
		out(rec)
	case opIOUring, opCompat:
		rec.Kind = KindUnobserved
		out(rec)
	case opFork:
		rec.Kind = KindFork
		rec.PPID = r.ppid
		rv.forked(r.pid, r.ppid)
		out(rec)
	case opExit:
		rec.Kind = KindExit
		rec.ExitStatus = r.exitCode
		out(rec)
	}
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
	pred := policy.Consumes
	switch {
	case r.flags&oTmpfile == oTmpfile:
		pred = policy.Provides // an unnamed file in the directory p
		rec.Event.Tmpfile = true
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
	exe, exeOK := "", false
	if hasObj {
		exe, exeOK = fdPathExe(r.pid, obj)
	}
	script := len(r.path1) > 0 && string(r.path1) != string(r.path0)
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
