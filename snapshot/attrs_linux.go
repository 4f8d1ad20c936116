//go:build linux

package snapshot

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attrs are a file's inode flags (chattr(1)): what FS_IOC_GETFLAGS and
// FS_IOC_FSGETXATTR report. A file's owner can set some of them without
// any capability (nodump, noatime, sync, dirsync, projinherit, and the
// project id itself from the initial user namespace) through an ioctl on
// a read-only descriptor, so they are metadata the agent can change like
// its mode, and a rollback puts them back.
type Attrs struct {
	Flags uint32 `json:"flags"` // FS_IOC_GETFLAGS
	// FSX says FS_IOC_FSGETXATTR answered: XFlags and ProjID are recorded.
	FSX    bool   `json:"fsx,omitempty"`
	XFlags uint32 `json:"xflags,omitempty"`
	ProjID uint32 `json:"projid,omitempty"`
}

// Inode flags (linux/fs.h). x/sys/unix does not name them.
const (
	flImmutable = 0x00000010 // FS_IMMUTABLE_FL
	flAppend    = 0x00000020 // FS_APPEND_FL
	// flSettable: the flags a FS_IOC_SETFLAGS can change (the generic
	// FS_FL_USER_MODIFIABLE bits and the newer per-inode switches). Only
	// they are compared and set: a filesystem also reports flags of its
	// own that it manages itself (ext4's extents, htree index, inline
	// data), which differ on a recreated file and are not settable.
	flSettable = 0x000380FF | // secrm..noatime, notail, dirsync, topdir
		0x00000400 | // FS_NOCOMP_FL
		0x00004000 | // FS_JOURNAL_DATA_FL
		0x00800000 | // FS_NOCOW_FL
		0x02000000 | // FS_DAX_FL
		0x20000000 | // FS_PROJINHERIT_FL
		0x40000000 // FS_CASEFOLD_FL
	// flBlocking: while set, chmod, chown, utimes, xattrs, rename and
	// link of the inode fail (EPERM), so Restore lifts them first and sets
	// them last.
	flBlocking = flImmutable | flAppend

	xflHasAttr  = 0x80000000              // FS_XFLAG_HASATTR: reported, never set
	xflBlocking = 0x00000008 | 0x00000010 // FS_XFLAG_IMMUTABLE, FS_XFLAG_APPEND

	fsIocFSGetXattr = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFSSetXattr = 0x401c5820 // _IOW('X', 32, struct fsxattr)
)

// fsxattr is struct fsxattr of linux/fs.h.
type fsxattr struct {
	XFlags     uint32
	ExtSize    uint32
	NExtents   uint32
	ProjID     uint32
	CowExtSize uint32
	_          [8]byte
}

func getFSX(fd int) (fsxattr, error) {
	var x fsxattr
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFSGetXattr, uintptr(unsafe.Pointer(&x)))
	if e != 0 {
		return x, e
	}
	return x, nil
}

func setFSX(fd int, x *fsxattr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFSSetXattr, uintptr(unsafe.Pointer(x)))
	if e != 0 {
		return e
	}
	return nil
}

// hasAttrs: only regular files and directories are opened for their
// flags. Opening a device node could have effects of its own, a FIFO's
// ioctls are the pipe's, and a symlink cannot be opened at all.
func hasAttrs(t Type) bool { return t == TypeFile || t == TypeDir }

// openAttrs opens p for its flags' ioctls: read-only, never following a
// symlink, never blocking (a file someone turned into a FIFO meanwhile),
// never becoming a controlling terminal.
func openAttrs(p string) (int, error) {
	return unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
}

// noAttrs says an ioctl error means the filesystem keeps no such flags
// (tmpfs before 6.0, FAT, many FUSE filesystems): nothing to record.
func noAttrs(err error) bool {
	return err == unix.ENOTTY || err == unix.EOPNOTSUPP || err == unix.ENOTSUP || err == unix.EINVAL || err == unix.ENOSYS
}

// gone says an error means p vanished or was replaced by another kind of
// file since it was listed (ELOOP: a symlink now, O_NOFOLLOW).
func gone(err error) bool {
	return err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR || err == unix.ENXIO
}

// readAttrs returns p's inode flags, or nil where the filesystem has none
// or p is no longer there (Take records it as it finds it).
func readAttrs(p string, t Type) (*Attrs, error) {
	if !hasAttrs(t) {
		return nil, nil
	}
	fd, err := openAttrs(p)
	if err != nil {
		if gone(err) {
			return nil, nil
		}
		return nil, err
	}
	defer unix.Close(fd)
	return attrsOf(fd)
}

func attrsOf(fd int) (*Attrs, error) {
	fl, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		if noAttrs(err) {
			return nil, nil
		}
		return nil, err
	}
	a := &Attrs{Flags: fl}
	if x, err := getFSX(fd); err == nil {
		a.FSX, a.XFlags, a.ProjID = true, x.XFlags&^xflHasAttr, x.ProjID
	} else if !noAttrs(err) {
		return nil, err
	}
	return a, nil
}

// attrFixer puts e's recorded flags back on p, in two steps around the
// rest of its metadata: lift lifts the immutable and append-only flags
// when they are set (nothing else could be changed while they are), and
// apply sets the recorded flags and project attributes.
type attrFixer struct {
	e  *Entry
	fd int
}

// openFixer opens p for e's flags; nil when e records none (a filesystem
// without them, a type that has none, a manifest from before they were
// recorded).
func openFixer(p string, e *Entry) (*attrFixer, error) {
	if e.Attrs == nil || !hasAttrs(e.Type) {
		return nil, nil
	}
	fd, err := openAttrs(p)
	if err != nil {
		return nil, err
	}
	return &attrFixer{e: e, fd: fd}, nil
}

func (f *attrFixer) close() {
	if f != nil {
		unix.Close(f.fd)
	}
}

// lift clears the blocking flags p has now, if any.
func (f *attrFixer) lift(p string) (bool, error) {
	if f == nil {
		return false, nil
	}
	cur, err := unix.IoctlGetUint32(f.fd, unix.FS_IOC_GETFLAGS)
	if err != nil || cur&flBlocking == 0 {
		return false, err
	}
	hook("meta", p)
	return true, unix.IoctlSetPointerInt(f.fd, unix.FS_IOC_SETFLAGS, int(cur&^flBlocking))
}

// apply sets the recorded flags (the settable ones; the filesystem's own
// stay as they are) and, where recorded, the project id and the extended
// flags FS_IOC_SETFLAGS cannot express. keepOff leaves the blocking flags
// off (a temp that is still to be renamed into place).
func (f *attrFixer) apply(p string, keepOff bool) (bool, error) {
	if f == nil {
		return false, nil
	}
	a := f.e.Attrs
	cur, err := unix.IoctlGetUint32(f.fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, err
	}
	want := cur&^flSettable | a.Flags&flSettable
	if keepOff {
		want &^= flBlocking
	}
	changed := false
	if want != cur {
		hook("meta", p)
		if err := unix.IoctlSetPointerInt(f.fd, unix.FS_IOC_SETFLAGS, int(want)); err != nil {
			return changed, err
		}
		changed = true
	}
	if !a.FSX {
		return changed, nil
	}
	x, err := getFSX(f.fd)
	if err != nil {
		return changed, err
	}
	wantX := a.XFlags
	if keepOff {
		wantX &^= xflBlocking
	}
	if x.XFlags&^xflHasAttr == wantX && x.ProjID == a.ProjID {
		return changed, nil
	}
	x.XFlags, x.ProjID = wantX, a.ProjID
	hook("meta", p)
	if err := setFSX(f.fd, &x); err != nil {
		return changed, err
	}
	return true, nil
}

// liftBlocking clears p's immutable and append-only flags, if it has any
// and can be opened for them; it says whether it cleared some.
func liftBlocking(p string) bool {
	st, err := lstat(p)
	if err != nil || st == nil || !hasAttrs(typeOf(st.Mode)) {
		return false
	}
	f, err := openFixer(p, &Entry{Type: typeOf(st.Mode), Attrs: &Attrs{}})
	if err != nil {
		return false
	}
	defer f.close()
	lifted, err := f.lift(p)
	return lifted && err == nil
}

// fillAttrs reads the inode flags of every entry the agent could change
// (not Fixed, not an anchor) that can have them, in parallel: the flags
// take an open(2) per file, the dearest step of a warm backup (on this
// kind of host an open costs several times a stat), and the walk itself
// is sequential.
func (t *taker) fillAttrs(lists ...[]Entry) error {
	var todo []*Entry
	for _, l := range lists {
		for i := range l {
			e := &l[i]
			if e.Fixed || e.Anchor || !hasAttrs(e.Type) {
				continue
			}
			// Only its owner can change an inode's flags; a Meta entry is
			// never rewritten (a file in the scopes may be, as a new inode
			// that must get the old one's flags).
			if e.Meta && t.agent != nil && e.UID != t.agent.uid {
				continue
			}
			todo = append(todo, e)
		}
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < min(t.workers, len(todo)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(todo) {
					return
				}
				e := todo[k]
				if k&255 == 0 && t.ctx.Err() != nil {
					return
				}
				a, err := attrsOfEntry(e)
				if err != nil && e.Other {
					continue // another session's: best effort, never a refusal
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = pathErr("read inode flags of", e.Path, err, e.Path)
					}
					mu.Unlock()
					return
				}
				e.Attrs = a
			}
		}()
	}
	wg.Wait()
	if err := t.ctx.Err(); err != nil {
		return err
	}
	return first
}
