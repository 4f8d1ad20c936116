package lsm

import (
	"bytes"
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// hdrSize is offsetof(struct klsm_event, data) (TestEventHeaderMatchesTheKernelLayout).
const hdrSize = 112

// Mirrors of bpf/include/lsm.h.
const (
	opOpen = 1 + iota
	opExec
	opMknod
	opMkdir
	opSymlink
	opLink
	opUnlink
	opRmdir
	opRename
	opTruncate
	opChmod
	opChown
	opConnectAbstract
	opSetattr
	opXattr
	opConnectUnix
	opSocketRaw
	opIoctl
	opMmapExec
	opMprotectExec
)

const (
	fDenied   = 1 << 0
	fNoPath1  = 1 << 2
	fNoPath2  = 1 << 3
	fReplaces = 1 << 4
	fExchange = 1 << 5
	fCreated  = 1 << 6
	fTmpfile  = 1 << 7
	fCounted  = 1 << 9
	fRefer    = 1 << 10
)

// sessRaw mirrors LSM_S_RAW (klsm_session.flags): NET:raw is declared.
const sessRaw = 1

// hooks names each operation by its LSM hook, as the log shows it (and as
// enforcer/decide recognises creations).
var hooks = [...]string{opOpen: "file_open", opExec: "bprm_check_security", opMknod: "path_mknod", opMkdir: "path_mkdir",
	opSymlink: "path_symlink", opLink: "path_link", opUnlink: "path_unlink", opRmdir: "path_rmdir", opRename: "path_rename",
	opTruncate: "path_truncate", opChmod: "path_chmod", opChown: "path_chown", opConnectAbstract: "socket_connect",
	opSetattr: "inode_setattr", opXattr: "inode_setxattr", opConnectUnix: "unix_stream_connect",
	opSocketRaw: "socket_create", opIoctl: "file_ioctl", opMmapExec: "mmap_file", opMprotectExec: "file_mprotect"}

// Unnamed stands for an object the kernel could not name for the task
// (deleted, O_TMPFILE, outside its root); no rule covers it, so it is
// always a violation.
const Unnamed = "(unnamed object)"

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// seenKey mirrors struct klsm_seen_key without the cgroup id.
type seenKey struct {
	dent, mnt, ino  uint64
	gen, sess, rgen uint32
	op              uint16
	need            uint8
}

// keyAt reads a struct klsm_seen_key (minus its cgroup id) at b[0:].
func keyAt(b []byte) seenKey {
	le := binary.LittleEndian
	return seenKey{dent: le.Uint64(b[8:]), mnt: le.Uint64(b[16:]), ino: le.Uint64(b[24:]),
		gen: le.Uint32(b[32:]), sess: le.Uint32(b[36:]), rgen: le.Uint32(b[40:]), op: le.Uint16(b[44:]), need: b[46]}
}

// decode turns one ring-buffer record into an event, and for a counted
// open (fCounted) the key its repeats are counted under.
func decode(b []byte) (event.Event, *seenKey, bool) {
	if len(b) < hdrSize {
		return event.Event{}, nil, false
	}
	le := binary.LittleEndian
	op := le.Uint32(b[24:])
	flags := le.Uint32(b[28:])
	need1 := b[32]
	len1, len2 := le.Uint32(b[36:]), le.Uint32(b[40:])
	if op == 0 || int(op) >= len(hooks) || hdrSize+uint64(len1)+uint64(len2) > uint64(len(b)) {
		return event.Event{}, nil, false
	}
	p1 := event.SessionProc(cstr(b[hdrSize : hdrSize+len1]))
	p2 := event.SessionProc(cstr(b[hdrSize+len1 : hdrSize+len1+len2]))
	if flags&fNoPath1 != 0 || p1 == "" {
		p1 = Unnamed
	}
	if flags&fNoPath2 != 0 {
		p2 = Unnamed
	}
	ev := event.Event{
		Time:    time.Now(),
		Source:  event.SourceLSM,
		PID:     le.Uint32(b[16:]),
		TID:     le.Uint32(b[20:]),
		Comm:    cstr(b[48:64]),
		Syscall: hooks[op],
		Blocked: flags&fDenied != 0,
	}
	switch {
	case flags&fRefer != 0:
		// A link or rename that would give the inode content rights its
		// name lacks, answered EXDEV as Landlock answers its REFER
		// refusal: the tool copies instead, and nothing happened.
		ev.Blocked, ev.Errno = false, int32(unix.EXDEV)
	case ev.Blocked:
		ev.Errno = int32(unix.EPERM)
	}
	file := func(p policy.Predicate, path string) policy.Triple { return policy.FileTriple(p, path) }
	switch op {
	case opOpen:
		pred := policy.Consumes
		switch {
		case need1&(1<<policy.Provides) != 0:
			pred = policy.Provides
		case need1&(1<<policy.Mutates) != 0:
			pred = policy.Mutates
		}
		ev.Triple = file(pred, p1)
		ev.Tmpfile = flags&fTmpfile != 0
		if flags&fCreated != 0 {
			// The kernel created the file: a creation for decide.
			ev.Syscall = "open"
		}
	case opExec:
		ev.Triple = policy.ExecTriple(p1)
		ev.Extra = file(policy.Consumes, p1)
	case opMknod, opMkdir, opSymlink:
		ev.Triple = file(policy.Provides, p1)
	case opUnlink, opRmdir:
		ev.Triple = file(policy.Deletes, p1)
	case opConnectUnix:
		ev.Triple = file(policy.Consumes, p1)
	case opTruncate, opChmod, opChown, opSetattr, opXattr, opIoctl:
		ev.Triple = file(policy.Mutates, p1)
	case opMmapExec, opMprotectExec:
		// Code of the file run without an exec: judged as its exec
		// (only refusals are reported: the kernel allowed the rest by
		// the same PROC rules or a library directory).
		ev.Triple = policy.ExecTriple(p1)
	case opLink:
		ev.Triple = file(policy.Provides, p1)
		ev.Extra = file(policy.Consumes, p2)
	case opSocketRaw:
		ev.Triple = policy.RawSocketTriple()
	case opConnectAbstract:
		// Named as the tracepoint backend names it: NET:@name.
		ev.Triple = policy.Triple{Predicate: policy.Consumes, Type: policy.ObjNet, Host: p1}
	case opRename:
		ev.Triple = file(policy.Renames, p1)
		if flags&(fReplaces|fExchange) != 0 {
			ev.Extra = file(policy.Mutates, p2)
		} else {
			ev.Extra = file(policy.Provides, p2)
		}
	}
	if flags&fCounted != 0 {
		k := keyAt(b[64:])
		return ev, &k, true
	}
	return ev, nil, true
}
