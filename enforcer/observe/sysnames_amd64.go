//go:build linux

package observe

import "golang.org/x/sys/unix"

// legacyNames are x86_64's path syscalls that arm64 never had.
var legacyNames = map[int32]string{
	unix.SYS_OPEN: "open", unix.SYS_CREAT: "creat", unix.SYS_MKDIR: "mkdir", unix.SYS_MKNOD: "mknod",
	unix.SYS_UNLINK: "unlink", unix.SYS_RMDIR: "rmdir", unix.SYS_RENAME: "rename", unix.SYS_LINK: "link",
	unix.SYS_SYMLINK: "symlink", unix.SYS_CHMOD: "chmod", unix.SYS_CHOWN: "chown", unix.SYS_LCHOWN: "lchown",
	unix.SYS_UTIME: "utime", unix.SYS_UTIMES: "utimes", unix.SYS_FUTIMESAT: "futimesat",
}
