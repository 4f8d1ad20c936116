/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * observe.h: the record bpf/observe.bpf.c sends to user space
 * (enforcer/observe decodes it; keep both in step: the Go side checks the
 * layout against the bpf2go-generated type in a test).
 */
#ifndef KLOCK_OBSERVE_H
#define KLOCK_OBSERVE_H

#define OBS_PATH_MAX 4096
#define OBS_COMM_LEN 16

/* Operations: the BPF side normalises architecture syscall numbers to these,
 * so user space never needs a syscall table. */
enum obs_op {
	OBS_OP_NONE = 0,
	OBS_OP_OPEN,        /* open, openat, openat2, creat, open_by_handle_at */
	OBS_OP_MKDIR,       /* mkdir, mkdirat */
	OBS_OP_MKNOD,       /* mknod, mknodat */
	OBS_OP_UNLINK,      /* unlink, unlinkat (flags: AT_REMOVEDIR) */
	OBS_OP_RMDIR,       /* rmdir */
	OBS_OP_RENAME,      /* rename, renameat, renameat2 */
	OBS_OP_LINK,        /* link, linkat */
	OBS_OP_SYMLINK,     /* symlink, symlinkat (path0 = target string, path1 = new link) */
	OBS_OP_TRUNCATE,    /* truncate (path), ftruncate (fd) */
	OBS_OP_CHMOD,       /* chmod, fchmod, fchmodat, fchmodat2 */
	OBS_OP_CHOWN,       /* chown, lchown, fchown, fchownat */
	OBS_OP_UTIMES,      /* utime, utimes, futimesat, utimensat */
	OBS_OP_XATTR,       /* set/remove xattr families */
	OBS_OP_EXEC,        /* sched_process_exec (success) or a failed execve/execveat */
	OBS_OP_CONNECT,
	OBS_OP_SENDTO,      /* sendto, sendmsg, sendmmsg with an address */
	OBS_OP_BIND,
	OBS_OP_LISTEN,
	OBS_OP_SOCKET,      /* raw or packet sockets only */
	OBS_OP_IO_URING,    /* io_uring_setup / io_uring_enter / io_uring_register */
	OBS_OP_COMPAT,      /* a 32-bit (ia32) syscall: not decoded */
	OBS_OP_FORK,        /* sched_process_fork of a new process (not a thread) */
	OBS_OP_EXIT,        /* sched_process_exit of a whole process */
	OBS_OP_IOCTL,       /* a metadata ioctl (metaioctl.h) on fd; flags = the command */
};

/* Where a path argument's string came from / how the object was named. */
enum obs_kflags {
	OBS_F_COMPAT    = 1 << 0, /* ia32 syscall */
	OBS_F_FAULT0    = 1 << 1, /* path0 could not be read */
	OBS_F_FAULT1    = 1 << 2, /* path1 could not be read */
	OBS_F_INO       = 1 << 3, /* ino/dev/mode name the object the kernel acted on */
	OBS_F_CREATED   = 1 << 4, /* open created the file (FMODE_CREATED) */
	OBS_F_ADDR      = 1 << 5, /* family/addr/port are set */
	OBS_F_BASE      = 1 << 6, /* base_ino/base_dev name the dirfd or cwd */
	OBS_F_SOCK      = 1 << 7, /* sotype/proto came from the kernel socket */
	OBS_F_TRUNC     = 1 << 8, /* path0 was longer than OBS_PATH_MAX */
	OBS_F_FDPATH    = 1 << 9, /* the object is named by the fd argument, not a path */
	OBS_F_BASE2     = 1 << 10, /* base2_ino/base2_dev name dirfd2 (or cwd) */
	/* path1 is the kernel's own path of the object (opens and f* calls,
	 * which have no second path, and the file an exec that was not a
	 * script loaded): the walk of its struct path (dentry d_parent/d_name
	 * up through the mounts) to the task's root, i.e. the path as the
	 * process saw it, at sys_exit (at sched_process_exec for an exec); for
	 * a file of an internal mount (a memfd), "/" and its name, as d_path. */
	OBS_F_KPATH     = 1 << 11,
	/* path1 is the object's path from the root of its filesystem (dev),
	 * no mount known: a path-based metadata call whose inode was caught
	 * inside the syscall (ctime tracepoints); ino/dev are set too. */
	OBS_F_KPATH_SB  = 1 << 12,
	/* The first open of its seen key: later opens with the same key are
	 * counted in obs_seen instead of reported (user space reads the
	 * counts at the end of the session). */
	OBS_F_COUNTED   = 1 << 13,
	/* path1 is the kernel's own path (to the task's root, at sys_exit)
	 * of the directory a relative path0 starts from: dirfd's directory
	 * or the cwd (base_ino/base_dev name it too). Set only for ops with
	 * one path whose object has no kernel path of its own. */
	OBS_F_KBASE     = 1 << 14,
	/* A bound address's port was chosen by the kernel (bind to port 0, or
	 * listen on an unbound socket): the socket has no SOCK_BINDPORT_LOCK. */
	OBS_F_EPHEMERAL = 1 << 15,
};

/* An open that was reported once: what decides its triple (the object,
 * by dentry, mount, inode and generation; the open flags) and the
 * session's rename generation when it was seen. */
struct obs_seen_key {
	__u64 cgid;
	__u64 dent;
	__u64 mnt;
	__u64 ino;
	__u32 gen;
	__u32 flags; /* open flags as the caller gave them */
	__u64 rgen;
};

/* Where a read-only open's file is (struct obs_rec.scope): its
 * directory (dentry, inode, generation), its mount and the task's root,
 * at the session's rename generation. User space takes the mount and the
 * root from the first such read it judged below a directory to count the
 * next ones there (struct obs_subtree). */
struct obs_scope_key {
	__u64 cgid;
	__u64 dent;  /* the directory's struct dentry * */
	__u64 mnt;   /* the file's struct vfsmount * */
	__u64 root;  /* the task's root dentry: a path is relative to it */
	__u64 ino;   /* the directory's inode number */
	__u32 gen;   /* ... and generation */
	__u32 pad;
	__u64 rgen;
};

/* A directory below which a session's reads are counted, not reported
 * (map obs_subtree, key: cgroup id): a read-only open of a regular file
 * with one name, on mount mnt, by a task whose root is root, whose
 * dentry has the directory (inode ino on that mount) among its
 * ancestors. User space sets mnt, root and ino (Watch.CountBelow) once
 * it judged such a read allowed by an intent that allows every path
 * below the directory; the kernel counts. */
struct obs_subtree {
	__u64 mnt;
	__u64 root;
	__u64 ino;
	__u64 count; /* reads counted */
	__u64 first; /* bpf_ktime_get_boot_ns of the first */
};

struct obs_rec {
	__u64 ts;        /* bpf_ktime_get_boot_ns */
	__u64 cgid;      /* cgroup v2 id of the task */
	__s64 ret;       /* syscall return value (0 for exec/fork/exit) */
	__u64 flags;     /* open flags, *at flags, rename flags, socket type */
	__u64 ino;       /* object inode (OBS_F_INO) */
	__u64 base_ino;  /* dirfd/cwd inode for path0 (OBS_F_BASE) */
	__u64 base2_ino; /* dirfd2/cwd inode for path1 (OBS_F_BASE2) */
	__u32 dev;       /* kernel dev_t (s_dev) of ino */
	__u32 base_dev;
	__u32 base2_dev;
	__u32 pid;       /* tgid */
	__u32 tid;
	__u32 ppid;      /* fork: parent tgid; exec: old tid */
	__u32 mode;      /* create/chmod mode; f_mode of an opened file */
	__s32 nr;        /* raw syscall number */
	__s32 dirfd;
	__s32 dirfd2;
	__s32 fd;        /* the fd argument of fd-based ops */
	__u16 op;
	__u16 kflags;
	__u16 len0;      /* bytes of path0 including the NUL (0: none) */
	__u16 len1;
	__u16 family;
	__u16 sotype;
	__u16 proto;
	__u16 port;      /* host order */
	__u8 addr[16];
	__u32 exit_code;
	/* f* calls (fchmod, fchown, ftruncate, futimens, fsetxattr): 1 when
	 * the fd's file had no name left at sys_exit (i_nlink 0: unlinked,
	 * or O_TMPFILE never linked). Nothing outside the process reaches
	 * such a file and nothing of it outlives its last fd. */
	__u32 unnamed;
	/* The user addresses of path0 and path1 when reading them faulted
	 * (OBS_F_FAULT0/1): the kernel read the string, but its page was
	 * out of the page tables by sys_exit (reclaim, compaction, the
	 * process's own madvise), and a BPF read cannot fault it back in.
	 * User space reads the string again from the process. */
	__u64 uptr0;
	__u64 uptr1;
	struct obs_seen_key seen; /* OBS_F_COUNTED */
	/* A successful read-only open of a regular file with one name:
	 * where its file is (cgid 0: not such a read). */
	struct obs_scope_key scope;
	char comm[OBS_COMM_LEN];
	/* Only the bytes used are sent: the record up to path0, path0's len0
	 * bytes, then path1's len1 bytes right after them. The BPF side
	 * writes path1 there in the first place (path1_at), so path1 below
	 * only reserves the room. */
	char path0[OBS_PATH_MAX];
	char path1[OBS_PATH_MAX];
};

/* Per-session entry of the watched map (key: cgroup id). */
struct obs_session {
	__u64 lost; /* records of this cgroup the ring buffer could not take */
	/* When not 0, only records whose op bit (1 << op) is set are sent:
	 * a session whose other operations another backend (bpf-lsm)
	 * decides and reports. */
	__u64 ops;
	/* Bumped by every rename the session makes (inside the syscall, where
	 * the kernel stamps ctime before it moves the name, and at its exit):
	 * a name seen before it is not trusted after it. */
	__u64 rgen;
};

#endif
