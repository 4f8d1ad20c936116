/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * lsm.h: maps and records shared by bpf/lsm.bpf.c and enforcer/lsm (keep
 * both in step: bpf2go generates the Go types from these structs).
 */
#ifndef KLOCK_LSM_H
#define KLOCK_LSM_H

/* Path bytes in an LPM key: 4 bytes of session id + 248 = 252 <= the LPM
 * trie's 256-byte limit. Rules longer than LSM_KEY_PATH-1 bytes are
 * refused by enforcer/lsm; longer paths are looked up by their first
 * LSM_KEY_PATH bytes, which is exact because every rule fits. */
#define LSM_KEY_PATH 248
#define LSM_MAX_RULES 65536
#define LSM_MAX_SESSIONS 1024

/* Access bits: bit i is policy.Predicate i, plus exec (PROVIDES PROC). */
#define LSM_PROVIDES (1 << 0)
#define LSM_CONSUMES (1 << 1)
#define LSM_MUTATES (1 << 2)
#define LSM_DELETES (1 << 3)
#define LSM_DEPENDS_ON (1 << 4)
#define LSM_RENAMES (1 << 5)
#define LSM_EXEC (1 << 6)
/* Executable mappings only (mmap_file, file_mprotect): the baseline's
 * library directories, whose files every dynamic program maps. */
#define LSM_MAPEXEC (1 << 7)
/* What a hard link carries over to its new name. */
#define LSM_CONTENT (LSM_CONSUMES | LSM_MUTATES | LSM_DEPENDS_ON | LSM_EXEC | LSM_MAPEXEC)

enum lsm_op {
	LSM_OP_OPEN = 1,
	LSM_OP_EXEC,
	LSM_OP_MKNOD,
	LSM_OP_MKDIR,
	LSM_OP_SYMLINK,
	LSM_OP_LINK,     /* path1 = the new name, path2 = the existing file */
	LSM_OP_UNLINK,
	LSM_OP_RMDIR,
	LSM_OP_RENAME,   /* path1 = the source, path2 = the destination */
	LSM_OP_TRUNCATE,
	LSM_OP_CHMOD,
	LSM_OP_CHOWN,
	LSM_OP_CONNECT_ABSTRACT, /* path1 = "@name": an abstract AF_UNIX address */
	LSM_OP_SETATTR,          /* times (utimes, touch): the other attributes have path hooks */
	LSM_OP_XATTR,            /* setxattr, removexattr */
	LSM_OP_CONNECT_UNIX,     /* path1 = the socket file a stream connect or datagram send reaches */
	LSM_OP_SOCKET_RAW,       /* a raw or packet socket (no path) */
	LSM_OP_IOCTL,            /* a metadata ioctl (metaioctl.h) on path1's file */
	LSM_OP_MMAP_EXEC,        /* path1 mapped executable (mmap_file) */
	LSM_OP_MPROTECT_EXEC,    /* path1's mapping made executable (file_mprotect) */
};

/* Session states: until the agent's own exec, the session's first process
 * is klock's stage 2 (two execs: the re-exec of klock, then the agent). */
enum lsm_state { LSM_ARMING = 0, LSM_ARMED = 1 };

struct klsm_session {
	__u32 sess;   /* the rules' session id (LPM key prefix) */
	__u32 state;  /* enum lsm_state */
	__u32 execs;  /* first-round bprm checks seen while arming */
	__u32 flags;  /* LSM_S_* */
	__u64 lost;   /* records the ring buffer could not take */
};

/* klsm_session.flags */
#define LSM_S_RAW 1 /* NET:raw declared: raw and packet sockets allowed */

struct klsm_key {
	__u32 prefixlen; /* bits: 32 (sess) + 8 per path byte */
	__u32 sess;
	unsigned char path[LSM_KEY_PATH];
};

/* A file the session created (open with O_CREAT that made it): the
 * session may read, change, delete and rename it wherever it is, as
 * enforcer/decide's created set allows. Keyed by inode identity with its
 * generation, so a recycled inode number never inherits the rights. */
struct klsm_created {
	__u64 cgid;
	__u64 ino;
	__u32 dev;
	__u32 gen;
};
#define LSM_CREATED_GRANTS (LSM_CONSUMES | LSM_MUTATES | LSM_DELETES | LSM_RENAMES)

enum lsm_rule_kind {
	LSM_R_EXACT = 0,  /* key = the path and its NUL */
	LSM_R_PREFIX = 1, /* key = a directory and its trailing '/' */
};

/* The union of the access every rule covering a path grants, so the
 * longest match alone decides: direct applies to an exact path, or to a
 * name directly in the prefix's directory; deeper to anything further
 * below. */
struct klsm_rule {
	__u8 direct;
	__u8 deeper;
	__u8 kind;   /* enum lsm_rule_kind */
	__u8 pad;
	__u16 keylen; /* path bytes in the key */
	__u16 pad2;
};

enum lsm_event_flags {
	LSM_E_DENIED = 1 << 0,   /* the kernel refused it (EPERM) */
	LSM_E_NOPATH1 = 1 << 2,  /* path1 has no name the task can reach: denied */
	LSM_E_NOPATH2 = 1 << 3,
	LSM_E_REPLACES = 1 << 4, /* rename/link destination existed */
	LSM_E_EXCHANGE = 1 << 5, /* RENAME_EXCHANGE */
	LSM_E_CREATED = 1 << 6,  /* open created the file */
	LSM_E_TMPFILE = 1 << 7,  /* O_TMPFILE: path1 is the directory */
	LSM_E_OWNED = 1 << 8,    /* path1 is a file the session created */
	/* An allowed open reported once: its repeats are counted in lsm_seen
	 * under (cgid, dent, ino, gen, op, need) and collected at the end. */
	LSM_E_COUNTED = 1 << 9,
	/* A link or rename refused only because its new name would give the
	 * inode content rights its existing name lacks (Landlock's REFER
	 * rule): answered EXDEV, as Landlock answers it, so tools fall back
	 * to copying; nothing happened, and it is reported as failed. */
	LSM_E_REFER = 1 << 10,
};

#define LSM_PATH_MAX 4096

/* The identity of a reported, allowed operation whose triple is its need
 * on the object alone (opens, truncate, chmod, chown, times, xattrs; op is
 * 0 for all of them: see counted_op), and the kernel's decision cache: the dentry and mount name the path as long as
 * nothing was renamed (rgen) and the rules did not change (sess); the inode
 * number and generation make a recycled dentry address harmless. A repeat
 * with the same key is allowed and counted without a walk or a lookup. */
struct klsm_seen_key {
	__u64 cgid;
	__u64 dent;
	__u64 mnt;
	__u64 ino;
	__u32 gen;
	__u32 sess; /* the rules it was allowed by */
	__u32 rgen; /* the renames it was allowed after (lsm_grgen) */
	__u16 op;
	__u8 need;
	__u8 pad;
};


/* One hook decision. data holds path1 (len1 bytes with its NUL) then
 * path2 (len2 bytes); only header + len1 + len2 bytes are sent. */
struct klsm_event {
	__u64 ts;
	__u64 cgid;
	__u32 pid;
	__u32 tid;
	__u32 op;    /* enum lsm_op */
	__u32 flags; /* enum lsm_event_flags */
	__u8 need1, have1, need2, have2;
	__u32 len1;
	__u32 len2;
	__u32 pad;
	char comm[16];
	struct klsm_seen_key key; /* with LSM_E_COUNTED: where its repeats are counted */
	char data[2 * LSM_PATH_MAX];
};


#endif
