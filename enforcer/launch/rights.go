package launch

import (
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/policy"
)

// FSRights is a set of Landlock file-system access rights (the
// LANDLOCK_ACCESS_FS_* bits).
type FSRights = stage2.FSRights

// NetRights is a set of Landlock network access rights
// (LANDLOCK_ACCESS_NET_*).
type NetRights = stage2.NetRights

const (
	rRead       = FSRights(ll.AccessFSReadFile)
	rReadDir    = FSRights(ll.AccessFSReadDir)
	rWrite      = FSRights(ll.AccessFSWriteFile)
	rTruncate   = FSRights(ll.AccessFSTruncate)
	rExec       = FSRights(ll.AccessFSExecute)
	rIoctlDev   = FSRights(ll.AccessFSIoctlDev)
	rResolveUnx = FSRights(ll.AccessFSResolveUnix)
	rRemoveFile = FSRights(ll.AccessFSRemoveFile)
	rRemoveDir  = FSRights(ll.AccessFSRemoveDir)
	rRefer      = FSRights(ll.AccessFSRefer)
	rMake       = FSRights(ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSMakeSym |
		ll.AccessFSMakeSock | ll.AccessFSMakeFifo)

	// fileClass are the rights the kernel accepts on a rule whose fd is not
	// a directory; every other right only makes sense on a directory.
	fileClass = rRead | rWrite | rTruncate | rExec | rIoctlDev | rResolveUnx
	// writeClass are rights that change the file system.
	writeClass = rWrite | rTruncate | rMake | rRemoveFile | rRemoveDir | rRefer |
		FSRights(ll.AccessFSMakeChar|ll.AccessFSMakeBlock)
)

// rightsFor maps a rule's granted predicates (with implications, see
// policy.Grants) to Landlock rights:
//
//	CONSUMES, DEPENDS_ON  READ_FILE, READ_DIR
//	MUTATES               WRITE_FILE, TRUNCATE, IOCTL_DEV, RESOLVE_UNIX
//	PROVIDES              MAKE_{REG,DIR,SYM,SOCK,FIFO} on the directory, REFER,
//	                      and WRITE_FILE, TRUNCATE, READ_FILE so a created file
//	                      can be filled and read back (O_RDWR, O_TMPFILE)
//	DELETES               REMOVE_FILE, REMOVE_DIR (on the containing directory)
//	RENAMES               REMOVE_FILE, REMOVE_DIR, REFER (the source leaves its directory)
//
// MAKE_CHAR and MAKE_BLOCK are never granted (device nodes need CAP_MKNOD,
// which the agent never has). Executing is granted by PROC rules only
// (execRights).
func rightsFor(g policy.Access) FSRights {
	var r FSRights
	if g.Has(policy.Consumes) || g.Has(policy.DependsOn) {
		r |= rRead | rReadDir
	}
	if g.Has(policy.Mutates) {
		r |= rWrite | rTruncate | rIoctlDev | rResolveUnx
	}
	if g.Has(policy.Provides) {
		r |= rMake | rRefer | rWrite | rTruncate | rRead
	}
	if g.Has(policy.Deletes) {
		r |= rRemoveFile | rRemoveDir
	}
	if g.Has(policy.Renames) {
		r |= rRemoveFile | rRemoveDir | rRefer
	}
	return r
}

// execRights is what a PROC rule grants: the kernel opens an executable
// for reading and executing (FMODE_READ|__FMODE_EXEC), so both are needed.
const execRights = rExec | rRead

// handledFS is every file-system right the kernel knows at ABI abi.
func handledFS(abi int) FSRights {
	var h FSRights
	switch {
	case abi >= 9:
		h = 1<<17 - 1
	case abi >= 5:
		h = 1<<16 - 1
	case abi >= 3:
		h = 1<<15 - 1
	case abi == 2:
		h = 1<<14 - 1
	case abi == 1:
		h = 1<<13 - 1
	}
	return h
}

// handledNetTCP is the TCP rights at ABI abi (ABI 4 added them).
func handledNetTCP(abi int) NetRights {
	if abi >= 4 {
		return NetRights(ll.AccessNetBindTCP | ll.AccessNetConnectTCP)
	}
	return 0
}

// scopedAt is the IPC scopes at ABI abi (ABI 6 added signal and abstract
// unix socket scoping).
func scopedAt(abi int) uint64 {
	if abi >= 6 {
		return ll.ScopeSignal | ll.ScopeAbstractUnixSocket
	}
	return 0
}
