//go:build linux && (amd64 || arm64)

package observe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"unsafe"
)

// op mirrors enum obs_op in bpf/include/observe.h.
type op uint16

const (
	opNone op = iota
	opOpen
	opMkdir
	opMknod
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opTruncate
	opChmod
	opChown
	opUtimes
	opXattr
	opExec
	opConnect
	opSendto
	opBind
	opListen
	opSocket
	opIOUring
	opCompat
	opFork
	opExit
	opIoctl
)

// kflags mirrors enum obs_kflags.
const (
	fCompat  = 1 << 0
	fFault0  = 1 << 1
	fFault1  = 1 << 2
	fIno     = 1 << 3
	fCreated = 1 << 4
	fAddr    = 1 << 5
	fBase    = 1 << 6
	fSock    = 1 << 7
	fTrunc   = 1 << 8
	fFDPath  = 1 << 9
	fBase2   = 1 << 10
	fKPath   = 1 << 11
	fKPathSB = 1 << 12
	fCounted = 1 << 13
	fKBase   = 1 << 14
	// fEphemeral: the bound port was chosen by the kernel (bind to port
	// 0, listen on an unbound socket).
	fEphemeral = 1 << 15
)

// seenKey mirrors struct obs_seen_key: an open whose repeats the kernel
// counts (fCounted) instead of reporting.
type seenKey = observeObsSeenKey

// scopeKey mirrors struct obs_scope_key: a directory whose reads the
// kernel counts (map scoped) instead of reporting.
type scopeKey = observeObsScopeKey

// raw is one decoded kernel record (struct obs_rec without the unused tail).
type raw struct {
	ts                    uint64
	cgid                  uint64
	ret                   int64
	flags                 uint64
	ino, baseIno, base2   uint64
	dev, baseDev, b2Dev   uint32
	pid, tid, ppid, mode  uint32
	nr, dirfd, dirfd2, fd int32
	op                    op
	kflags                uint16
	family, sotype        uint16
	proto, port           uint16
	addr                  [16]byte
	exitCode              uint32
	// unnamed: an f* call's file had no name left at sys_exit (i_nlink
	// 0: unlinked, or O_TMPFILE never linked).
	unnamed bool
	// uptr0, uptr1: the user addresses of path0 and path1 when the BPF
	// read of them faulted (fFault0, fFault1).
	uptr0, uptr1 uint64
	comm         string
	path0, path1 []byte // raw bytes, NUL-trimmed (path0 of AF_UNIX may start with NUL: abstract)
	// kpath is the kernel's own path of the object (fKPath: from the
	// task's root; fKPathSB: from its filesystem's root), carried in
	// path1's buffer (path1 is then nil).
	kpath string
	// kbase is the kernel's own path of the directory a relative path0
	// started from (fKBase), carried in path1's buffer.
	kbase string
	seen  seenKey // fCounted
	// scope: the directory key of a read the kernel could count
	// (Cgid 0: none).
	scope scopeKey
}

var errShort = errors.New("observe: short record")

// Field offsets come from the bpf2go-generated type, so they follow the C
// header by construction.
var (
	zr       observeObsRec
	offP0    = int(unsafe.Offsetof(zr.Path0)) // path1's bytes follow path0's
	offComm  = int(unsafe.Offsetof(zr.Comm))
	offSeen  = unsafe.Offsetof(zr.Seen)
	offScope = unsafe.Offsetof(zr.Scope)
)

func decode(b []byte, r *raw) error {
	if len(b) < offP0 {
		return errShort
	}
	le := binary.LittleEndian
	u64 := func(off uintptr) uint64 { return le.Uint64(b[off:]) }
	u32 := func(off uintptr) uint32 { return le.Uint32(b[off:]) }
	u16 := func(off uintptr) uint16 { return le.Uint16(b[off:]) }
	r.ts = u64(unsafe.Offsetof(zr.Ts))
	r.cgid = u64(unsafe.Offsetof(zr.Cgid))
	r.ret = int64(u64(unsafe.Offsetof(zr.Ret)))
	r.flags = u64(unsafe.Offsetof(zr.Flags))
	r.ino = u64(unsafe.Offsetof(zr.Ino))
	r.baseIno = u64(unsafe.Offsetof(zr.BaseIno))
	r.base2 = u64(unsafe.Offsetof(zr.Base2Ino))
	r.dev = u32(unsafe.Offsetof(zr.Dev))
	r.baseDev = u32(unsafe.Offsetof(zr.BaseDev))
	r.b2Dev = u32(unsafe.Offsetof(zr.Base2Dev))
	r.pid = u32(unsafe.Offsetof(zr.Pid))
	r.tid = u32(unsafe.Offsetof(zr.Tid))
	r.ppid = u32(unsafe.Offsetof(zr.Ppid))
	r.mode = u32(unsafe.Offsetof(zr.Mode))
	r.nr = int32(u32(unsafe.Offsetof(zr.Nr)))
	r.dirfd = int32(u32(unsafe.Offsetof(zr.Dirfd)))
	r.dirfd2 = int32(u32(unsafe.Offsetof(zr.Dirfd2)))
	r.fd = int32(u32(unsafe.Offsetof(zr.Fd)))
	r.op = op(u16(unsafe.Offsetof(zr.Op)))
	r.kflags = u16(unsafe.Offsetof(zr.Kflags))
	len0 := int(u16(unsafe.Offsetof(zr.Len0)))
	len1 := int(u16(unsafe.Offsetof(zr.Len1)))
	r.family = u16(unsafe.Offsetof(zr.Family))
	r.sotype = u16(unsafe.Offsetof(zr.Sotype))
	r.proto = u16(unsafe.Offsetof(zr.Proto))
	r.port = u16(unsafe.Offsetof(zr.Port))
	copy(r.addr[:], b[unsafe.Offsetof(zr.Addr):])
	r.exitCode = u32(unsafe.Offsetof(zr.ExitCode))
	r.unnamed = u32(unsafe.Offsetof(zr.Unnamed)) != 0
	r.uptr0 = u64(unsafe.Offsetof(zr.Uptr0))
	r.uptr1 = u64(unsafe.Offsetof(zr.Uptr1))
	comm := b[offComm : offComm+len(zr.Comm)]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	r.comm = string(comm)
	r.path0, r.path1 = nil, nil
	if len0 > 0 {
		if offP0+len0 > len(b) {
			return errShort
		}
		r.path0 = b[offP0 : offP0+len0]
		if r.op != opConnect && r.op != opSendto && r.op != opBind {
			r.path0 = trimNUL(r.path0)
		}
	}
	if len1 > 0 {
		off1 := offP0 + min(len0, len(zr.Path0))
		if off1+len1 > len(b) {
			return errShort
		}
		r.path1 = trimNUL(b[off1 : off1+len1])
	}
	r.seen = seenKey{}
	if r.kflags&fCounted != 0 {
		k := offSeen
		r.seen = seenKey{Cgid: u64(k + unsafe.Offsetof(zr.Seen.Cgid)), Dent: u64(k + unsafe.Offsetof(zr.Seen.Dent)),
			Mnt: u64(k + unsafe.Offsetof(zr.Seen.Mnt)), Ino: u64(k + unsafe.Offsetof(zr.Seen.Ino)),
			Gen: u32(k + unsafe.Offsetof(zr.Seen.Gen)), Flags: u32(k + unsafe.Offsetof(zr.Seen.Flags)),
			Rgen: u64(k + unsafe.Offsetof(zr.Seen.Rgen))}
	}
	r.scope = scopeKey{}
	if k := offScope; u64(k+unsafe.Offsetof(zr.Scope.Cgid)) != 0 {
		r.scope = scopeKey{Cgid: u64(k + unsafe.Offsetof(zr.Scope.Cgid)), Dent: u64(k + unsafe.Offsetof(zr.Scope.Dent)),
			Mnt: u64(k + unsafe.Offsetof(zr.Scope.Mnt)), Root: u64(k + unsafe.Offsetof(zr.Scope.Root)),
			Ino: u64(k + unsafe.Offsetof(zr.Scope.Ino)), Gen: u32(k + unsafe.Offsetof(zr.Scope.Gen)),
			Rgen: u64(k + unsafe.Offsetof(zr.Scope.Rgen))}
	}
	r.kpath, r.kbase = "", ""
	if r.kflags&(fKPath|fKPathSB) != 0 {
		r.kpath, r.path1 = string(r.path1), nil
		if r.kpath == "" || r.kpath[0] != '/' {
			r.kpath = ""
			r.kflags &^= fKPath | fKPathSB
		}
	} else if r.kflags&fKBase != 0 {
		r.kbase, r.path1 = string(r.path1), nil
		if r.kbase == "" || r.kbase[0] != '/' {
			r.kbase = ""
			r.kflags &^= fKBase
		}
	}
	return nil
}

func trimNUL(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
