// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * observe.bpf.c: klock's observation backend (detects, never blocks).
 *
 * Every program starts with one hash lookup of the current task's cgroup v2
 * id in `watched`; tasks of cgroups nobody watches return at once. Several
 * sessions share the loaded programs: each session adds its cgroup id.
 *
 * File and network syscalls are recorded at tp_btf/sys_exit, once the kernel
 * has answered: the arguments are still in the saved user registers, the
 * path strings are still in user memory (and resident: the kernel has just
 * copied them, so bpf_probe_read_user_str cannot miss a not-yet-faulted page,
 * which a read at sys_enter can), and the return value is known. One record
 * per completed syscall goes over the `events` ring buffer. Objects the
 * kernel resolved itself are named by inode (the fd an open returned, the fd
 * argument of f* calls, the dirfd or cwd a relative path starts from, the
 * file an exec loaded) so user space can check its own path resolution.
 *
 * A successful execve never returns to the old image: it is recorded at
 * tp_btf/sched_process_exec with the kernel's copy of the file name.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "observe.h"
#include "kwalk.h"
#include "metaioctl.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AT_FDCWD -100
#define AT_REMOVEDIR 0x200
#define AT_EMPTY_PATH 0x1000
#define O_WRONLY 01
#define O_CREAT 0100
#define O_TRUNC 01000
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define SOCK_BINDPORT_LOCK 8
#define AF_NETLINK 16
#define AF_PACKET 17
#define SOCK_RAW 3
#define EBADF 9
#define ENOTSOCK 88
#define EPERM 1
#define EACCES 13
#define FMODE_CREATED (1U << 20)
#define S_IFMT 00170000
#define S_IFDIR 0040000
#define S_IFREG 0100000
#define TS_COMPAT 0x0002

/* Syscall numbers: x86_64 has the legacy path calls, arm64 only the *at ones. */
#if defined(__TARGET_ARCH_x86)
#define SYSNR(regs) BPF_CORE_READ((regs), orig_ax)
#define ARG6(regs) BPF_CORE_READ((regs), r9)
#define NR_open 2
#define NR_creat 85
#define NR_mkdir 83
#define NR_mknod 133
#define NR_unlink 87
#define NR_rmdir 84
#define NR_rename 82
#define NR_link 86
#define NR_symlink 88
#define NR_chmod 90
#define NR_chown 92
#define NR_lchown 94
#define NR_utime 132
#define NR_utimes 235
#define NR_futimesat 261
#define NR_openat 257
#define NR_openat2 437
#define NR_open_by_handle_at 304
#define NR_mkdirat 258
#define NR_mknodat 259
#define NR_unlinkat 263
#define NR_renameat 264
#define NR_renameat2 316
#define NR_linkat 265
#define NR_symlinkat 266
#define NR_truncate 76
#define NR_ftruncate 77
#define NR_fchmod 91
#define NR_fchmodat 268
#define NR_fchmodat2 452
#define NR_fchown 93
#define NR_fchownat 260
#define NR_utimensat 280
#define NR_setxattr 188
#define NR_lsetxattr 189
#define NR_fsetxattr 190
#define NR_removexattr 197
#define NR_lremovexattr 198
#define NR_fremovexattr 199
#define NR_setxattrat 463
#define NR_removexattrat 466
#define NR_execve 59
#define NR_execveat 322
#define NR_socket 41
#define NR_connect 42
#define NR_sendto 44
#define NR_sendmsg 46
#define NR_sendmmsg 307
#define NR_bind 49
#define NR_listen 50
#define NR_io_uring_setup 425
#define NR_io_uring_enter 426
#define NR_io_uring_register 427
#define NR_ioctl 16
#elif defined(__TARGET_ARCH_arm64)
/* vmlinux.h comes from the (x86_64) build host; CO-RE relocates these onto
 * the arm64 kernel's own types. */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
} __attribute__((preserve_access_index));
struct pt_regs___obs_arm64 {
	__s32 syscallno;
} __attribute__((preserve_access_index));
#define SYSNR(regs) BPF_CORE_READ((struct pt_regs___obs_arm64 *)(regs), syscallno)
#define ARG6(regs) BPF_CORE_READ((struct user_pt_regs *)(regs), regs[5])
#define NR_openat 56
#define NR_openat2 437
#define NR_open_by_handle_at 265
#define NR_mkdirat 34
#define NR_mknodat 33
#define NR_unlinkat 35
#define NR_renameat 38
#define NR_renameat2 276
#define NR_linkat 37
#define NR_symlinkat 36
#define NR_truncate 45
#define NR_ftruncate 46
#define NR_fchmod 52
#define NR_fchmodat 53
#define NR_fchmodat2 452
#define NR_fchown 55
#define NR_fchownat 54
#define NR_utimensat 88
#define NR_setxattr 5
#define NR_lsetxattr 6
#define NR_fsetxattr 7
#define NR_removexattr 14
#define NR_lremovexattr 15
#define NR_fremovexattr 16
#define NR_setxattrat 463
#define NR_removexattrat 466
#define NR_execve 221
#define NR_execveat 281
#define NR_socket 198
#define NR_connect 203
#define NR_sendto 206
#define NR_sendmsg 211
#define NR_sendmmsg 269
#define NR_bind 200
#define NR_listen 201
#define NR_io_uring_setup 425
#define NR_io_uring_enter 426
#define NR_io_uring_register 427
#define NR_ioctl 29
#else
#error "observe.bpf.c: unsupported target architecture"
#endif

#define ARG1(r) PT_REGS_PARM1_CORE_SYSCALL(r)
#define ARG2(r) PT_REGS_PARM2_CORE_SYSCALL(r)
#define ARG3(r) PT_REGS_PARM3_CORE_SYSCALL(r)
#define ARG4(r) PT_REGS_PARM4_CORE_SYSCALL(r)
#define ARG5(r) PT_REGS_PARM5_CORE_SYSCALL(r)

/* Set by user space before load. */
const volatile __u64 wakeup_bytes = 0; /* 0: wake the reader on every record */
/* 1: urgent records (urgent()) wake the reader at once whatever wakeup_bytes
 * says; 0: they wait for the batch like the others. */
const volatile __u8 wake_urgent = 1;

/* Renames that went ahead, by any process on the machine, counted at
 * their sys_exit. A session's own renames also bump its obs_session.rgen
 * (inside the syscall too, from the ctime hooks); this one catches the
 * others: a name moved by someone outside the session must not keep a
 * repeat cache entry that would count the agent's opens of the new name
 * under the old one. Seen keys carry the sum of both. */
__u64 obs_grgen = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct obs_session);
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obs_rec);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Opens reported once, with how many times they happened: a program that
 * opens the same file a thousand times costs one record and a counter. A
 * full table only means every open is reported (counts stay exact). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct obs_seen_key);
	__type(value, __u64);
} seen SEC(".maps");

/* Force the generated Go type. */
const struct obs_seen_key *unused_seen __attribute__((unused));

/* Reads counted below a directory: a read-only open of a regular file
 * with one name below the directory user space put here for the session
 * (it judged a read there allowed by an intent that allows every path
 * below it the same way) is counted in the entry, not reported. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct obs_subtree);
} subtree SEC(".maps");

const struct obs_scope_key *unused_scope __attribute__((unused));
const struct obs_subtree *unused_subtree __attribute__((unused));


/* The inode a path-based metadata call changed, caught inside the syscall
 * by the ctime tracepoints (key: tid), consumed at its sys_exit. */
struct obs_pending {
	__u64 ino;
	__u64 inode;  /* struct inode * */
	__u64 dentry; /* struct dentry *: its first alias */
	__u32 dev;
	__s32 nr;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct obs_pending);
} pending SEC(".maps");

/* rec_init prepares the per-CPU record of an operation of cgroup cgid,
 * whose session the caller has looked up. */
static __always_inline struct obs_rec *rec_init(__u64 cgid, __u16 op)
{
	__u32 zero = 0;
	struct obs_rec *r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return NULL;
	__u64 id = bpf_get_current_pid_tgid();
	r->ts = bpf_ktime_get_boot_ns();
	r->cgid = cgid;
	r->ret = 0;
	r->flags = 0;
	r->ino = 0;
	r->base_ino = 0;
	r->base2_ino = 0;
	r->dev = 0;
	r->base_dev = 0;
	r->base2_dev = 0;
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->ppid = 0;
	r->mode = 0;
	r->nr = -1;
	r->dirfd = AT_FDCWD;
	r->dirfd2 = AT_FDCWD;
	r->fd = -1;
	r->op = op;
	r->kflags = 0;
	r->len0 = 0;
	r->len1 = 0;
	r->family = 0;
	r->sotype = 0;
	r->proto = 0;
	r->port = 0;
	__builtin_memset(r->addr, 0, sizeof(r->addr));
	r->exit_code = 0;
	r->unnamed = 0;
	r->uptr0 = 0;
	r->uptr1 = 0;
	r->scope.cgid = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	return r;
}

/* rec_begin prepares the record of an operation of the current task's
 * session, if it has one (*sess: that session). */
static __always_inline struct obs_rec *rec_begin(struct obs_session **sess, __u16 op)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	struct obs_session *s = bpf_map_lookup_elem(&watched, &cgid);
	if (!s)
		return NULL;
	*sess = s;
	return rec_init(cgid, op);
}

/* urgent: a record the reader should have at once rather than with the
 * next batch: a change no wall blocks (chmod, chown, xattrs, metadata
 * ioctls; not times,
 * which untar and cp -p make by the thousand), and an operation a wall
 * refused. Either is how a violation usually shows, and in strict mode the
 * agent runs on until klock reads it. And a record whose path must be read
 * again from the process. */
static __always_inline int urgent(const struct obs_rec *r)
{
	if (r->op == OBS_OP_CHMOD || r->op == OBS_OP_CHOWN || r->op == OBS_OP_XATTR || r->op == OBS_OP_IOCTL)
		return 1;
	/* A path the BPF read faulted on: user space reads it again from
	 * the process, best while the process still holds it. */
	if (r->kflags & (OBS_F_FAULT0 | OBS_F_FAULT1))
		return 1;
	return r->ret == -EACCES || r->ret == -EPERM;
}

static __always_inline void rec_emit(struct obs_rec *r, struct obs_session *s)
{
	if (s->ops && !(s->ops & (1ULL << (r->op & 63))))
		return;
	/* Only the bytes used: the header, path0's, path1's. */
	__u32 n0 = r->len0, n1 = r->len1;
	if (n0 > OBS_PATH_MAX)
		n0 = OBS_PATH_MAX;
	if (n1 > OBS_PATH_MAX)
		n1 = OBS_PATH_MAX;
	__u32 hdr = __builtin_offsetof(struct obs_rec, path0);
	__u64 flags = 0;
	if (wakeup_bytes) {
		if ((wake_urgent && urgent(r)) || bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
			flags = BPF_RB_FORCE_WAKEUP;
		else
			flags = BPF_RB_NO_WAKEUP;
	}
	/* One copy into the ring: path1's bytes follow path0's in the record
	 * (path1_at), so the header and both paths are one run. (Reserving a
	 * dynptr and writing the three parts cost five helper calls a record,
	 * some 40% of this program's time on a file workload.) */
	if (bpf_ringbuf_output(&events, r, hdr + n0 + n1, flags)) {
		__u32 zero = 0;
		__u64 *l = bpf_map_lookup_elem(&lost, &zero);
		if (l)
			*l += 1;
		__sync_fetch_and_add(&s->lost, 1);
	}
}

/* path1_at is where path1's bytes go: right after path0's, which are final
 * by the time a second path is read (so the record is contiguous for
 * rec_emit). The path1 array reserves the room: off + OBS_PATH_MAX never
 * passes its end. */
static __always_inline char *path1_at(struct obs_rec *r)
{
	__u32 off = r->len0;
	if (off > OBS_PATH_MAX)
		off = OBS_PATH_MAX;
	return r->path0 + off;
}

static __always_inline void read_path0(struct obs_rec *r, const char *up)
{
	if (!up) {
		r->kflags |= OBS_F_FAULT0;
		return;
	}
	long n = bpf_probe_read_user_str(r->path0, sizeof(r->path0), up);
	if (n < 0) {
		r->kflags |= OBS_F_FAULT0;
		r->uptr0 = (__u64)up;
		r->path0[0] = 0;
		return;
	}
	r->len0 = n;
}

static __always_inline void read_path1(struct obs_rec *r, const char *up)
{
	if (!up) {
		r->kflags |= OBS_F_FAULT1;
		return;
	}
	char *p1 = path1_at(r);
	long n = bpf_probe_read_user_str(p1, OBS_PATH_MAX, up);
	if (n < 0) {
		r->kflags |= OBS_F_FAULT1;
		r->uptr1 = (__u64)up;
		p1[0] = 0;
		return;
	}
	r->len1 = n;
}

/* fd_file_at returns the file behind the current task's fd, as a number
 * (0: none). A global function, verified once: the walk to the fd array
 * is direct loads from the trusted task (not a helper call per field),
 * and each direct load costs the verifier a search of the struct's BTF,
 * which inlined at every call site and in every state made the load some
 * 30 ms slower. Only the array slot, at a variable index, needs
 * bpf_probe_read_kernel. */
__noinline __u64 fd_file_at(int fd)
{
	if (fd < 0)
		return 0;
	struct task_struct *t = bpf_get_current_task_btf();
	struct files_struct *files = t->files;
	if (!files)
		return 0;
	struct fdtable *fdt = files->fdt;
	if (!fdt)
		return 0;
	unsigned int max = fdt->max_fds;
	if ((unsigned int)fd >= max)
		return 0;
	struct file **arr = fdt->fd;
	struct file *f = NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &arr[fd]);
	return (__u64)f;
}

/* fd_file: the file behind the current task's fd. */
static __always_inline struct file *fd_file(int fd)
{
	return (struct file *)fd_file_at(fd);
}

static __always_inline void inode_ident(struct inode *i, __u64 *ino, __u32 *dev)
{
	*ino = BPF_CORE_READ(i, i_ino);
	*dev = BPF_CORE_READ(i, i_sb, s_dev);
}

/* base_ident names the directory a relative path starts from: dirfd's file or
 * the cwd. Returns 0 when found. */
static __always_inline int base_ident(struct task_struct *t, int dirfd, __u64 *ino, __u32 *dev)
{
	struct inode *i;
	if (dirfd == AT_FDCWD) {
		i = BPF_CORE_READ(t, fs, pwd.dentry, d_inode);
	} else {
		struct file *f = fd_file(dirfd);
		if (!f)
			return -1;
		i = BPF_CORE_READ(f, f_inode);
	}
	if (!i)
		return -1;
	inode_ident(i, ino, dev);
	return 0;
}

static __always_inline void base0(struct task_struct *t, struct obs_rec *r)
{
	if (r->len0 > 1 && r->path0[0] == '/')
		return;
	if (!base_ident(t, r->dirfd, &r->base_ino, &r->base_dev))
		r->kflags |= OBS_F_BASE;
}

static __always_inline void base1(struct task_struct *t, struct obs_rec *r)
{
	if (r->len1 > 1 && path1_at(r)[0] == '/')
		return;
	if (!base_ident(t, r->dirfd2, &r->base2_ino, &r->base2_dev))
		r->kflags |= OBS_F_BASE2;
}

static __always_inline void kpath_file(struct task_struct *t, struct obs_rec *r, struct file *f);

static __always_inline void fd_object(struct obs_rec *r, int fd)
{
	r->fd = fd;
	r->kflags |= OBS_F_FDPATH;
	struct file *f = fd_file(fd);
	if (!f)
		return;
	struct inode *i = BPF_CORE_READ(f, f_inode);
	if (!i)
		return;
	inode_ident(i, &r->ino, &r->dev);
	r->kflags |= OBS_F_INO;
}

/* ---- the kernel's path of an object (kwalk.h) ---- */

/* kpath walks from d (on mount vm, or to its filesystem's root when vm is
 * NULL) and puts the path in path1. Returns 0 when it did. */
static __always_inline int kpath(struct task_struct *t, struct obs_rec *r, struct dentry *d, struct vfsmount *vm)
{
	__u32 pos, last;
	struct kw_buf *kb = kwalk_path(t, d, vm, &pos, &last, 1);
	if (!kb)
		return -1;
	/* pos in [0, KW_PATH_MAX-1], so n in [1, KW_PATH_MAX] for the
	 * verifier as well. */
	__u64 n = KW_PATH_MAX - pos;
	if (n < 2)
		return -1;
	if (bpf_probe_read_kernel(path1_at(r), n, &kb->b[pos]))
		return -1;
	r->len1 = n;
	return 0;
}

static __always_inline void kpath_file(struct task_struct *t, struct obs_rec *r, struct file *f)
{
	if (!f || r->len1)
		return;
	if (!kpath(t, r, BPF_CORE_READ(f, f_path.dentry), BPF_CORE_READ(f, f_path.mnt)))
		r->kflags |= OBS_F_KPATH;
}

/* internal_name names a file of an internal mount (a memfd; no mount in
 * any namespace, so kpath has nothing to walk) as the kernel's d_path does,
 * and so /proc/<pid>/exe: "/" and its name, when it sits at the mount's
 * root or is a root itself. */
static __always_inline void internal_name(struct obs_rec *r, struct file *f)
{
	if (!f)
		return;
	struct vfsmount *vm = BPF_CORE_READ(f, f_path.mnt);
	if (!vm || !(BPF_CORE_READ(vm, mnt_flags) & MNT_INTERNAL))
		return;
	/* A memfd's dentry is a pseudo one, its own parent. */
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct dentry *up = d ? BPF_CORE_READ(d, d_parent) : NULL;
	if (!d || (up != d && up != BPF_CORE_READ(vm, mnt_root)))
		return;
	char *b = path1_at(r);
	b[0] = '/';
	long n = bpf_probe_read_kernel_str(b + 1, OBS_PATH_MAX - 1, BPF_CORE_READ(d, d_name.name));
	if (n > 1) {
		r->len1 = n + 1;
		r->kflags |= OBS_F_KPATH;
	}
}

/* Path-based metadata calls: no fd, so the object is caught inside the
 * syscall, where the kernel updates its ctime. */
static __always_inline int path_meta_nr(long nr)
{
	switch (nr) {
#ifdef NR_chmod
	case NR_chmod:
	case NR_chown:
	case NR_lchown:
	case NR_utime:
	case NR_utimes:
	case NR_futimesat:
#endif
	case NR_fchmodat:
	case NR_fchmodat2:
	case NR_fchownat:
	case NR_utimensat:
	case NR_truncate:
	case NR_setxattr:
	case NR_lsetxattr:
	case NR_removexattr:
	case NR_lremovexattr:
	case NR_setxattrat:
	case NR_removexattrat:
		return 1;
	}
	return 0;
}

/* rename_nr: the syscalls that move names (and so bump obs_session.rgen). */
static __always_inline int rename_nr(long nr)
{
	switch (nr) {
#ifdef NR_rename
	case NR_rename:
#endif
	case NR_renameat:
	case NR_renameat2:
		return 1;
	}
	return 0;
}

static __always_inline int ctime_hit(struct inode *i)
{
	/* Every ctime change on the machine comes here (each write() makes
	 * one): the syscall number first, the session lookup only for ours. */
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return 0;
	long nr = SYSNR(regs);
	int rename = rename_nr(nr);
	if (!rename && !path_meta_nr(nr))
		return 0;
	__u64 cgid = bpf_get_current_cgroup_id();
	struct obs_session *w = bpf_map_lookup_elem(&watched, &cgid);
	if (!w)
		return 0;
	if (rename) {
		/* The file system stamps the directories' ctime before the
		 * name moves: from here on, no name seen before is trusted. */
		__sync_fetch_and_add(&w->rgen, 1);
		return 0;
	}
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct obs_pending p = {};
	p.nr = nr;
	p.inode = (__u64)i;
	inode_ident(i, &p.ino, &p.dev);
	/* Its dentry: the (first) alias. */
	struct hlist_node *first = BPF_CORE_READ(i, i_dentry.first);
	if (first)
		p.dentry = (__u64)((char *)first - bpf_core_field_offset(struct dentry, d_u));
	/* The last ctime change of the syscall is its object's (overlayfs
	 * changes the upper inode first, then copies the times to its own). */
	bpf_map_update_elem(&pending, &tid, &p, BPF_ANY);
	return 0;
}

SEC("tp_btf/inode_set_ctime_to_ts")
int BPF_PROG(obs_ctime_ts, struct inode *i, struct timespec64 *ts)
{
	return ctime_hit(i);
}

SEC("tp_btf/ctime_ns_xchg")
int BPF_PROG(obs_ctime_xchg, struct inode *i, __u32 old, __u32 new, __u32 cur)
{
	return ctime_hit(i);
}

SEC("tp_btf/ctime_xchg_skip")
int BPF_PROG(obs_ctime_skip, struct inode *i, struct timespec64 *ts)
{
	return ctime_hit(i);
}

/* Kernels before 6.13 have no ctime tracepoints: there the entry of
 * notify_change (chmod, chown, utimes and truncate by name all go
 * through it) and of the xattr calls names the inode instead, into the
 * same pending entry (fentry: attached only where the tracepoints are
 * missing). Their first argument is the mount's idmapping, whose type
 * changed in 6.3; only the dentry after it is read. vfs_setxattr (six
 * arguments), not __vfs_setxattr_locked (seven): x86 BPF trampolines
 * before 6.5 refuse a function of more than six (ENOTSUPP at attach). */
SEC("fentry/notify_change")
int BPF_PROG(obs_notify_change, void *idmap, struct dentry *dentry)
{
	struct inode *i = BPF_CORE_READ(dentry, d_inode);
	return i ? ctime_hit(i) : 0;
}

SEC("fentry/vfs_setxattr")
int BPF_PROG(obs_setxattr, void *idmap, struct dentry *dentry)
{
	struct inode *i = BPF_CORE_READ(dentry, d_inode);
	return i ? ctime_hit(i) : 0;
}

SEC("fentry/vfs_removexattr")
int BPF_PROG(obs_removexattr, void *idmap, struct dentry *dentry)
{
	struct inode *i = BPF_CORE_READ(dentry, d_inode);
	return i ? ctime_hit(i) : 0;
}

/* path_meta_object names the object a path-based metadata call changed, when
 * a ctime tracepoint caught it. */
static __always_inline void path_meta_object(struct task_struct *t, struct obs_rec *r, long nr)
{
	__u32 tid = r->tid;
	struct obs_pending *p = bpf_map_lookup_elem(&pending, &tid);
	if (!p)
		return;
	struct obs_pending c = *p;
	bpf_map_delete_elem(&pending, &tid);
	if (c.nr != nr || r->ret != 0 || (r->kflags & (OBS_F_INO | OBS_F_FDPATH)))
		return;
	r->ino = c.ino;
	r->dev = c.dev;
	r->kflags |= OBS_F_INO;
	struct dentry *d = (struct dentry *)c.dentry;
	if (r->len1 || !d || (__u64)BPF_CORE_READ(d, d_inode) != c.inode)
		return;
	if (!kpath(t, r, d, NULL))
		r->kflags |= OBS_F_KPATH_SB;
}

/* sock_info fills the socket's type, protocol and, when local, its bound
 * address (bind, listen). */
static __always_inline void sock_info(struct obs_rec *r, int fd, int local)
{
	r->fd = fd;
	struct file *f = fd_file(fd);
	if (!f)
		return;
	struct socket *so = BPF_CORE_READ(f, private_data);
	if (!so)
		return;
	struct sock *sk = BPF_CORE_READ(so, sk);
	if (!sk)
		return;
	r->sotype = BPF_CORE_READ(so, type);
	r->proto = BPF_CORE_READ(sk, sk_protocol);
	r->kflags |= OBS_F_SOCK;
	if (!local)
		return;
	__u16 fam = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (fam == AF_INET) {
		__u32 a = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__builtin_memcpy(r->addr, &a, 4);
	} else if (fam == AF_INET6) {
		BPF_CORE_READ_INTO(&r->addr, sk, __sk_common.skc_v6_rcv_saddr);
	} else {
		return;
	}
	r->family = fam;
	r->port = BPF_CORE_READ(sk, __sk_common.skc_num);
	r->kflags |= OBS_F_ADDR;
	/* The kernel locks the port a process named (inet_bind sets
	 * SOCK_BINDPORT_LOCK for a nonzero port); without the lock it chose
	 * one itself, and the process asked for "any port" (port 0). A
	 * bitfield before 6.2, a byte since: read it by CO-RE either way. */
	if (!(BPF_CORE_READ_BITFIELD_PROBED(sk, sk_userlocks) & SOCK_BINDPORT_LOCK))
		r->kflags |= OBS_F_EPHEMERAL;
}

/* read_sockaddr copies a user sockaddr; returns 0 when the family is one we
 * report (inet, inet6, unix). */
static __always_inline int read_sockaddr(struct obs_rec *r, const void *ua, long len)
{
	if (!ua || len < 2)
		return -1;
	__u16 fam = 0;
	if (bpf_probe_read_user(&fam, sizeof(fam), ua))
		return -1;
	if (fam == AF_INET) {
		struct {
			__u16 family;
			__u16 port;
			__u32 addr;
		} sin = {};
		if (bpf_probe_read_user(&sin, sizeof(sin), ua))
			return -1;
		r->port = bpf_ntohs(sin.port);
		__builtin_memcpy(r->addr, &sin.addr, 4);
	} else if (fam == AF_INET6) {
		struct {
			__u16 family;
			__u16 port;
			__u32 flow;
			__u8 addr[16];
		} sin6 = {};
		if (bpf_probe_read_user(&sin6, sizeof(sin6), ua))
			return -1;
		r->port = bpf_ntohs(sin6.port);
		__builtin_memcpy(r->addr, sin6.addr, 16);
	} else if (fam == AF_UNIX) {
		long n = len - 2;
		if (n <= 0)
			return -1; /* unnamed */
		if (n > 108)
			n = 108;
		if (bpf_probe_read_user(r->path0, n & 127, (const char *)ua + 2))
			return -1;
		r->len0 = n & 127;
	} else {
		return -1;
	}
	r->family = fam;
	r->kflags |= OBS_F_ADDR;
	return 0;
}

static __always_inline int is_sock_err(long ret)
{
	return ret == -EBADF || ret == -ENOTSOCK;
}

/* observed_nr: every syscall the switch in obs_sys_exit records; the rest
 * return before a record is prepared. Keep the two in step (the observe
 * tests run each of these calls). */
static __always_inline int observed_nr(long nr)
{
	switch (nr) {
#ifdef NR_open
	case NR_open:
	case NR_creat:
	case NR_mkdir:
	case NR_mknod:
	case NR_unlink:
	case NR_rmdir:
	case NR_rename:
	case NR_link:
	case NR_symlink:
	case NR_chmod:
	case NR_chown:
	case NR_lchown:
	case NR_utime:
	case NR_utimes:
	case NR_futimesat:
#endif
	case NR_openat:
	case NR_openat2:
	case NR_open_by_handle_at:
	case NR_mkdirat:
	case NR_mknodat:
	case NR_unlinkat:
	case NR_renameat:
	case NR_renameat2:
	case NR_linkat:
	case NR_symlinkat:
	case NR_truncate:
	case NR_ftruncate:
	case NR_fchmod:
	case NR_fchmodat:
	case NR_fchmodat2:
	case NR_fchown:
	case NR_fchownat:
	case NR_utimensat:
	case NR_setxattr:
	case NR_removexattr:
	case NR_lsetxattr:
	case NR_lremovexattr:
	case NR_fsetxattr:
	case NR_fremovexattr:
	case NR_setxattrat:
	case NR_removexattrat:
	case NR_execve:
	case NR_execveat:
	case NR_socket:
	case NR_connect:
	case NR_sendto:
	case NR_sendmsg:
	case NR_sendmmsg:
	case NR_bind:
	case NR_listen:
	case NR_io_uring_setup:
	case NR_io_uring_enter:
	case NR_io_uring_register:
		return 1;
	}
	return 0;
}

/* meta_ioctl_call: an ioctl that changes its file's metadata
 * (metaioctl.h). Every other ioctl on the machine (terminals, sockets)
 * returns on its command, before the session lookup. The seccomp filter
 * refuses these when the manifest lets the agent change no file; else they
 * are reported here as MUTATES of the descriptor's file. */
static __always_inline int meta_ioctl_call(long nr, struct pt_regs *regs)
{
	return nr == NR_ioctl && meta_ioctl((__u32)ARG2(regs));
}

/* seen_key fills k for a successful open (flags fl) that returned fd, when
 * its repeats may be counted instead of reported: not a creation, not a
 * directory (the resolver learns directories from their opens), not an
 * unlinked or O_TMPFILE file. Returns 0 when k is usable. A global
 * function: the verifier checks it once, not in every state of
 * obs_sys_exit that reaches a call. */
__noinline int seen_key(struct obs_seen_key *k, __u64 cgid, __u64 rgen, long fl, long fd)
{
	if (!k || fl < 0)
		return -1;
	struct file *f = fd_file(fd);
	if (!f)
		return -1;
	if (bpf_rdonly_cast) {
		/* Every repeated open comes here: read the file and inode
		 * with direct (fault-safe) loads through a BTF-typed view of
		 * the pointer, not a helper call per field (kernels >= 6.2;
		 * the kfunc is weak, so on older ones this branch is dead
		 * and the one below runs). */
		struct file *ff = bpf_rdonly_cast(f, bpf_core_type_id_kernel(struct file));
		if (ff->f_mode & FMODE_CREATED)
			return -1;
		struct inode *i = ff->f_inode;
		if (!i || (i->i_mode & S_IFMT) == S_IFDIR || i->__i_nlink == 0)
			return -1;
		k->dent = (__u64)ff->f_path.dentry;
		k->mnt = (__u64)ff->f_path.mnt;
		k->ino = i->i_ino;
		k->gen = i->i_generation;
	} else {
		if (BPF_CORE_READ(f, f_mode) & FMODE_CREATED)
			return -1;
		struct inode *i = BPF_CORE_READ(f, f_inode);
		if (!i || (BPF_CORE_READ(i, i_mode) & S_IFMT) == S_IFDIR || BPF_CORE_READ(i, __i_nlink) == 0)
			return -1;
		k->dent = (__u64)BPF_CORE_READ(f, f_path.dentry);
		k->mnt = (__u64)BPF_CORE_READ(f, f_path.mnt);
		k->ino = BPF_CORE_READ(i, i_ino);
		k->gen = BPF_CORE_READ(i, i_generation);
	}
	k->cgid = cgid;
	k->flags = fl;
	k->rgen = rgen;
	return 0;
}

/* open_nr: the opens by path whose repeats may be counted. */
static __always_inline int open_nr(long nr)
{
#ifdef NR_open
	if (nr == NR_open || nr == NR_creat)
		return 1;
#endif
	return nr == NR_openat || nr == NR_openat2;
}

/* O_PATH and __O_TMPFILE (uapi fcntl.h). */
#define O_PATH_ 010000000
#define O_TMPFILE_ 020000000
#define O_ACCMODE_ 03

/* scope_key fills k for a successful open (flags fl) that returned fd when
 * it is a read whose directory may count it (scoped): read-only flags (no
 * create, truncate, O_PATH or O_TMPFILE), a regular file the open did not
 * create, with exactly one name (a hard link is another name, which the
 * count must not stand for), in a directory on the same mount (not a
 * mount's root: a bind-mounted file's directory is another place). Its
 * parent dentry, the mount and the task's root say which path the kernel
 * walk would give; the rename generation, that no name moved since.
 * Returns 0 when k is usable. Global, like seen_key. */
__noinline int scope_key(struct obs_scope_key *k, __u64 cgid, __u64 rgen, long fl, long fd)
{
	if (!k || fl < 0 || (fl & (O_ACCMODE_ | O_CREAT | O_TRUNC | O_PATH_ | O_TMPFILE_)))
		return -1;
	struct file *f = fd_file(fd);
	if (!f)
		return -1;
	if (BPF_CORE_READ(f, f_mode) & FMODE_CREATED)
		return -1;
	struct inode *i = BPF_CORE_READ(f, f_inode);
	if (!i || (BPF_CORE_READ(i, i_mode) & S_IFMT) != S_IFREG || BPF_CORE_READ(i, __i_nlink) != 1)
		return -1;
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct vfsmount *vm = BPF_CORE_READ(f, f_path.mnt);
	struct dentry *p = BPF_CORE_READ(d, d_parent);
	if (!p || p == d || d == BPF_CORE_READ(vm, mnt_root))
		return -1;
	struct inode *pi = BPF_CORE_READ(p, d_inode);
	if (!pi)
		return -1;
	struct task_struct *t = bpf_get_current_task_btf();
	k->cgid = cgid;
	k->dent = (__u64)p;
	k->mnt = (__u64)vm;
	k->root = (__u64)BPF_CORE_READ(t, fs, root.dentry);
	k->ino = BPF_CORE_READ(pi, i_ino);
	k->gen = BPF_CORE_READ(pi, i_generation);
	k->pad = 0;
	k->rgen = rgen;
	return 0;
}

/* below_count counts a successful open of cgroup cgid (flags fl) that
 * returned fd when it reads a file below the session's counted directory
 * (map subtree), and returns 1; else 0. The file must be one scope_key
 * would name, on the entry's mount, opened by a task with the entry's
 * root, and the directory (by inode, on that mount) one of its dentry's
 * ancestors: the walk is made at each open, so a file renamed out of the
 * directory is reported again at once. Global, like seen_key. */
__noinline int below_count(__u64 cgid, long fl, long fd)
{
	if (fl < 0 || (fl & (O_ACCMODE_ | O_CREAT | O_TRUNC | O_PATH_ | O_TMPFILE_)))
		return 0;
	struct obs_subtree *st = bpf_map_lookup_elem(&subtree, &cgid);
	if (!st || !st->mnt)
		return 0;
	struct file *f = fd_file(fd);
	if (!f)
		return 0;
	struct vfsmount *vm = BPF_CORE_READ(f, f_path.mnt);
	if ((__u64)vm != st->mnt || (BPF_CORE_READ(f, f_mode) & FMODE_CREATED))
		return 0;
	struct inode *i = BPF_CORE_READ(f, f_inode);
	if (!i || (BPF_CORE_READ(i, i_mode) & S_IFMT) != S_IFREG || BPF_CORE_READ(i, __i_nlink) != 1)
		return 0;
	struct task_struct *t = bpf_get_current_task_btf();
	if ((__u64)BPF_CORE_READ(t, fs, root.dentry) != st->root)
		return 0;
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct dentry *top = BPF_CORE_READ(vm, mnt_root);
	__u64 want = st->ino;
	for (int n = 0; n < 64; n++) {
		if (!d || d == top)
			return 0;
		struct dentry *p = BPF_CORE_READ(d, d_parent);
		if (!p || p == d)
			return 0;
		if (BPF_CORE_READ(p, d_inode, i_ino) == want) {
			if (!st->first)
				st->first = bpf_ktime_get_boot_ns();
			__sync_fetch_and_add(&st->count, 1);
			return 1;
		}
		d = p;
	}
	return 0;
}

/* counted_repeat counts a successful open of cgroup cgid (syscall nr,
 * result ret; a: the argument that holds its flags, open's second, the
 * others' third) that was reported before with the same seen key, or
 * that reads a file below the session's counted directory (below_count),
 * and
 * returns 1; else 0. Global, like seen_key: every
 * branch here would otherwise multiply the states the verifier walks
 * through the rest of obs_sys_exit. */
__noinline int counted_repeat(__u64 cgid, __u64 rgen, long nr, long ret, __u64 a)
{
	long fl;
	switch (nr) {
#ifdef NR_open
	case NR_open:
		fl = (__u32)a;
		break;
	case NR_creat:
		fl = O_CREAT | O_WRONLY | O_TRUNC;
		break;
#endif
	case NR_openat:
		fl = (__u32)a;
		break;
	case NR_openat2: {
		__u64 how = 0;
		if (bpf_probe_read_user(&how, sizeof(how), (const void *)a))
			return 0;
		fl = (__u32)how;
		break;
	}
	default:
		return 0;
	}
	if (ret < 0)
		return 0;
	__u32 zero = 0;
	struct obs_rec *kr = bpf_map_lookup_elem(&scratch, &zero);
	if (!kr)
		return 0;
	if (!seen_key(&kr->seen, cgid, rgen, fl, ret)) {
		__u64 *cnt = bpf_map_lookup_elem(&seen, &kr->seen);
		if (cnt) {
			__sync_fetch_and_add(cnt, 1);
			return 1;
		}
	}
	return below_count(cgid, fl, ret);
}

/* count_from_now makes r, the record of an open about to be reported, the
 * one its repeats are counted under (OBS_F_COUNTED). r->flags holds the
 * open's flags, as counted_repeat reads them. Global, like seen_key. */
__noinline int count_from_now(struct obs_rec *r, __u64 rgen, long fd)
{
	if (!r || seen_key(&r->seen, r->cgid, rgen, (__u32)r->flags, fd))
		return 0;
	/* A copy on the stack: older verifiers (6.1) take no map key from a
	 * global function's memory argument. */
	struct obs_seen_key k = r->seen;
	__u64 one = 1;
	if (bpf_map_update_elem(&seen, &k, &one, BPF_NOEXIST))
		return 0;
	r->kflags |= OBS_F_COUNTED;
	return 1;
}

/* kbase_op: the ops whose only path is path0 (path1 free for the base). */
static __always_inline int kbase_op(__u16 op)
{
	switch (op) {
	case OBS_OP_OPEN:
	case OBS_OP_MKDIR:
	case OBS_OP_MKNOD:
	case OBS_OP_UNLINK:
	case OBS_OP_RMDIR:
	case OBS_OP_TRUNCATE:
	case OBS_OP_CHMOD:
	case OBS_OP_CHOWN:
	case OBS_OP_UTIMES:
	case OBS_OP_XATTR:
	case OBS_OP_EXEC:
		return 1;
	}
	return 0;
}

/* rec_finish completes a syscall's record with what the kernel resolved
 * and sends it. A global function, verified once: inlined, this tail (fd
 * lookups, the dentry walk, the ring buffer) was verified again for every
 * state the switch in obs_sys_exit arrived with — each case leaves nr and
 * ret with different known values — and cost most of the 146k
 * instructions, some 300 ms at every embedded start. s is the session
 * obs_sys_exit looked up (passed, not looked up again: a hash lookup per
 * record); rgen its rename generation when the syscall returned. */
__noinline int rec_finish(struct obs_rec *r, struct obs_session *s, __u64 rgen)
{
	if (!r || !s)
		return 0;
	struct task_struct *t = bpf_get_current_task_btf();
	/* What the kernel resolved: the fd an open returned, the base dir of a
	 * relative or empty path. */
	if (r->op == OBS_OP_OPEN && r->ret >= 0) {
		struct file *f = fd_file(r->ret);
		if (f) {
			struct inode *i = BPF_CORE_READ(f, f_inode);
			if (i) {
				inode_ident(i, &r->ino, &r->dev);
				r->kflags |= OBS_F_INO;
			}
			__u32 fm = BPF_CORE_READ(f, f_mode);
			r->mode = fm;
			if (fm & FMODE_CREATED)
				r->kflags |= OBS_F_CREATED;
		}
	}
	if (r->len0 && r->op != OBS_OP_SYMLINK && (r->family == 0 || r->family == AF_UNIX))
		base0(t, r);
	if (r->len1 && !(r->kflags & OBS_F_KPATH))
		base1(t, r);
	/* The kernel's own path of what it acted on (path1 is free for these
	 * ops): the file an open returned; the fd of f* calls is done in
	 * fd_object; path-based metadata calls by the inode caught inside. */
	if (r->op == OBS_OP_OPEN && r->ret >= 0) {
		kpath_file(t, r, fd_file(r->ret));
		/* Its repeats will be counted, not reported (open_by_handle_at
		 * names no path: always reported). */
		if ((r->kflags & (OBS_F_KPATH | OBS_F_FDPATH)) == OBS_F_KPATH) {
			count_from_now(r, rgen, r->ret);
			/* Where the file is, should user space count the reads
			 * below a directory it is in (Watch.CountBelow). */
			if (scope_key(&r->scope, r->cgid, rgen, (__u32)r->flags, r->ret))
				r->scope.cgid = 0;
		}
	} else if (path_meta_nr(r->nr)) {
		path_meta_object(t, r, r->nr); /* always consumes the tid's entry */
	}
	if (r->len1)
		goto emit;
	if ((r->kflags & OBS_F_FDPATH) && r->op != OBS_OP_OPEN) {
		/* An f* call (fchmod, fchown, futimens, ftruncate, fsetxattr):
		 * the kernel's path of the fd's file, so user space need not
		 * read it back from /proc (gone once the fd is closed). */
		struct file *f = fd_file(r->fd);
		kpath_file(t, r, f);
		struct inode *i = f ? BPF_CORE_READ(f, f_inode) : NULL;
		if (i && BPF_CORE_READ(i, __i_nlink) == 0)
			r->unnamed = 1;
	} else if (r->len0 > 1 && r->path0[0] != '/' && kbase_op(r->op) && r->family == 0) {
		/* A relative name: the kernel's path of the directory it
		 * started from, as the syscall saw it, instead of a readlink
		 * of /proc/<pid>/cwd or fd/<dirfd> after the fact (one
		 * syscall each, and wrong once the agent has moved on). */
		struct dentry *bd;
		struct vfsmount *bm;
		if (r->dirfd == AT_FDCWD) {
			bd = BPF_CORE_READ(t, fs, pwd.dentry);
			bm = BPF_CORE_READ(t, fs, pwd.mnt);
		} else {
			struct file *bf = fd_file(r->dirfd);
			if (!bf)
				goto emit;
			bd = BPF_CORE_READ(bf, f_path.dentry);
			bm = BPF_CORE_READ(bf, f_path.mnt);
		}
		if (!kpath(t, r, bd, bm))
			r->kflags |= OBS_F_KBASE;
	}
emit:
	rec_emit(r, s);
	return 0;
}

/* proc_nr: the syscalls a ProcessEvents watch still records (a failed
 * exec); its other syscalls return before a record is prepared. */
static __always_inline int proc_nr(long nr)
{
	return nr == NR_execve || nr == NR_execveat;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(obs_sys_exit, struct pt_regs *regs, long ret)
{
	long nr = SYSNR(regs);
	int compat = 0;
#if defined(__TARGET_ARCH_x86)
	/* Trusted: the 32-bit-syscall checks are direct loads. */
	struct task_struct *t = bpf_get_current_task_btf();
	compat = t->thread_info.status & TS_COMPAT;
#endif
	/* Most syscalls (read, write, close, stat, ...) are none of ours: they
	 * return here, on the syscall number alone, before the cgroup id and
	 * the session lookup, which every process on the machine would pay
	 * otherwise. (An ia32 syscall's number is not this table's: it goes
	 * on, and a session's is reported.) */
	if (!compat && !observed_nr(nr) && !meta_ioctl_call(nr, regs))
		return 0;
	if (ret == 0 && rename_nr(nr))
		__sync_fetch_and_add(&obs_grgen, 1);
	__u64 cgid = bpf_get_current_cgroup_id();
	struct obs_session *s = bpf_map_lookup_elem(&watched, &cgid);
	/* A session whose operations bpf-lsm and cgroup-net decide and
	 * report (ops mask): return before preparing a record. */
	if (!s || (s->ops && !proc_nr(nr)))
		return 0;
	if (rename_nr(nr))
		__sync_fetch_and_add(&s->rgen, 1); /* the name has moved */
	/* An open reported before (same object, flags and names): count it. */
	if (!compat && open_nr(nr)) {
		__u64 a = ARG3(regs);
#ifdef NR_open
		if (nr == NR_open)
			a = ARG2(regs);
#endif
		if (counted_repeat(cgid, s->rgen + obs_grgen, nr, ret, a))
			return 0;
	}
	struct obs_rec *r = rec_init(cgid, OBS_OP_NONE);
	if (!r)
		return 0;
	r->nr = nr;
	r->ret = ret;

#if defined(__TARGET_ARCH_x86)
	if (compat) {
		/* An ia32 syscall: its numbers are not this table's. Report it. */
		r->op = OBS_OP_COMPAT;
		r->kflags |= OBS_F_COMPAT;
		rec_emit(r, s);
		return 0;
	}
#endif

	switch (nr) {
	/* ---- open ---- */
#ifdef NR_open
	case NR_open:
		r->op = OBS_OP_OPEN;
		r->flags = ARG2(regs);
		r->mode = ARG3(regs);
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_creat:
		r->op = OBS_OP_OPEN;
		r->flags = O_CREAT | O_WRONLY | O_TRUNC;
		r->mode = ARG2(regs);
		read_path0(r, (const char *)ARG1(regs));
		break;
#endif
	case NR_openat:
		r->op = OBS_OP_OPEN;
		r->dirfd = ARG1(regs);
		r->flags = ARG3(regs);
		r->mode = ARG4(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	case NR_openat2: {
		r->op = OBS_OP_OPEN;
		r->dirfd = ARG1(regs);
		__u64 how[2] = {};
		bpf_probe_read_user(how, sizeof(how), (const void *)ARG3(regs));
		r->flags = how[0];
		r->mode = how[1];
		read_path0(r, (const char *)ARG2(regs));
		break;
	}
	case NR_open_by_handle_at:
		r->op = OBS_OP_OPEN;
		r->flags = ARG3(regs);
		r->dirfd = ARG1(regs);
		r->kflags |= OBS_F_FDPATH;
		break;
	/* ---- create ---- */
#ifdef NR_mkdir
	case NR_mkdir:
		r->op = OBS_OP_MKDIR;
		r->mode = ARG2(regs);
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_mknod:
		r->op = OBS_OP_MKNOD;
		r->mode = ARG2(regs);
		read_path0(r, (const char *)ARG1(regs));
		break;
#endif
	case NR_mkdirat:
		r->op = OBS_OP_MKDIR;
		r->dirfd = ARG1(regs);
		r->mode = ARG3(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	case NR_mknodat:
		r->op = OBS_OP_MKNOD;
		r->dirfd = ARG1(regs);
		r->mode = ARG3(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	/* ---- delete ---- */
#ifdef NR_unlink
	case NR_unlink:
		r->op = OBS_OP_UNLINK;
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_rmdir:
		r->op = OBS_OP_RMDIR;
		read_path0(r, (const char *)ARG1(regs));
		break;
#endif
	case NR_unlinkat:
		r->dirfd = ARG1(regs);
		r->flags = ARG3(regs);
		r->op = (r->flags & AT_REMOVEDIR) ? OBS_OP_RMDIR : OBS_OP_UNLINK;
		read_path0(r, (const char *)ARG2(regs));
		break;
	/* ---- two paths ---- */
#ifdef NR_rename
	case NR_rename:
		r->op = OBS_OP_RENAME;
		read_path0(r, (const char *)ARG1(regs));
		read_path1(r, (const char *)ARG2(regs));
		break;
	case NR_link:
		r->op = OBS_OP_LINK;
		read_path0(r, (const char *)ARG1(regs));
		read_path1(r, (const char *)ARG2(regs));
		break;
	case NR_symlink:
		r->op = OBS_OP_SYMLINK;
		read_path0(r, (const char *)ARG1(regs));
		read_path1(r, (const char *)ARG2(regs));
		break;
#endif
	case NR_renameat:
	case NR_renameat2:
		r->op = OBS_OP_RENAME;
		r->dirfd = ARG1(regs);
		r->dirfd2 = ARG3(regs);
		if (nr == NR_renameat2)
			r->flags = (__u32)ARG5(regs);
		read_path0(r, (const char *)ARG2(regs));
		read_path1(r, (const char *)ARG4(regs));
		break;
	case NR_linkat:
		r->op = OBS_OP_LINK;
		r->dirfd = ARG1(regs);
		r->dirfd2 = ARG3(regs);
		r->flags = (__u32)ARG5(regs);
		read_path0(r, (const char *)ARG2(regs));
		read_path1(r, (const char *)ARG4(regs));
		break;
	case NR_symlinkat:
		r->op = OBS_OP_SYMLINK;
		r->dirfd2 = ARG2(regs);
		read_path0(r, (const char *)ARG1(regs));
		read_path1(r, (const char *)ARG3(regs));
		break;
	/* ---- metadata and content by path ---- */
	case NR_truncate:
		r->op = OBS_OP_TRUNCATE;
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_ftruncate:
		r->op = OBS_OP_TRUNCATE;
		fd_object(r, ARG1(regs));
		break;
#ifdef NR_chmod
	case NR_chmod:
		r->op = OBS_OP_CHMOD;
		r->mode = ARG2(regs);
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_chown:
	case NR_lchown:
		r->op = OBS_OP_CHOWN;
		if (nr == NR_lchown)
			r->flags = 0x100; /* AT_SYMLINK_NOFOLLOW */
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_utime:
	case NR_utimes:
		r->op = OBS_OP_UTIMES;
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_futimesat:
		r->op = OBS_OP_UTIMES;
		r->dirfd = ARG1(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
#endif
	case NR_fchmod:
		r->op = OBS_OP_CHMOD;
		r->mode = ARG2(regs);
		fd_object(r, ARG1(regs));
		break;
	case NR_fchmodat:
	case NR_fchmodat2:
		r->op = OBS_OP_CHMOD;
		r->dirfd = ARG1(regs);
		r->mode = ARG3(regs);
		if (nr == NR_fchmodat2)
			r->flags = (__u32)ARG4(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	case NR_fchown:
		r->op = OBS_OP_CHOWN;
		fd_object(r, ARG1(regs));
		break;
	case NR_fchownat:
		r->op = OBS_OP_CHOWN;
		r->dirfd = ARG1(regs);
		r->flags = (__u32)ARG5(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	case NR_utimensat: {
		r->op = OBS_OP_UTIMES;
		r->dirfd = ARG1(regs);
		r->flags = (__u32)ARG4(regs);
		const char *p = (const char *)ARG2(regs);
		if (p)
			read_path0(r, p);
		else
			fd_object(r, r->dirfd); /* utimensat(fd, NULL, ...) */
		break;
	}
	case NR_setxattr:
	case NR_removexattr:
		r->op = OBS_OP_XATTR;
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_lsetxattr:
	case NR_lremovexattr:
		r->op = OBS_OP_XATTR;
		r->flags = 0x100; /* AT_SYMLINK_NOFOLLOW */
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_fsetxattr:
	case NR_fremovexattr:
		r->op = OBS_OP_XATTR;
		fd_object(r, ARG1(regs));
		break;
	case NR_setxattrat:
	case NR_removexattrat:
		r->op = OBS_OP_XATTR;
		r->dirfd = ARG1(regs);
		r->flags = (__u32)ARG3(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	/* ---- exec that failed (success is sched_process_exec) ---- */
	case NR_execve:
		if (ret == 0)
			return 0;
		r->op = OBS_OP_EXEC;
		read_path0(r, (const char *)ARG1(regs));
		break;
	case NR_execveat:
		if (ret == 0)
			return 0;
		r->op = OBS_OP_EXEC;
		r->dirfd = ARG1(regs);
		r->flags = (__u32)ARG5(regs);
		read_path0(r, (const char *)ARG2(regs));
		break;
	/* ---- network ---- */
	case NR_socket: {
		long fam = ARG1(regs), type = ARG2(regs);
		/* Raw IP and packet sockets. A netlink socket is SOCK_RAW
		 * too, but it talks to the kernel, not the network: glibc's
		 * getaddrinfo(AI_ADDRCONFIG) and getifaddrs open one to
		 * list the interfaces, and without capabilities it can read
		 * the configuration, not change it. */
		if (fam != AF_PACKET && ((type & 0xf) != SOCK_RAW || fam == AF_NETLINK))
			return 0;
		r->op = OBS_OP_SOCKET;
		r->family = fam;
		r->sotype = type & 0xf;
		r->proto = ARG3(regs);
		r->flags = type;
		break;
	}
	case NR_connect:
		r->op = OBS_OP_CONNECT;
		if (read_sockaddr(r, (const void *)ARG2(regs), ARG3(regs)))
			return 0;
		if (!is_sock_err(ret))
			sock_info(r, ARG1(regs), 0);
		break;
	case NR_sendto:
		r->op = OBS_OP_SENDTO;
		if (read_sockaddr(r, (const void *)ARG5(regs), (long)ARG6(regs)))
			return 0; /* connected socket: reported at connect */
		if (!is_sock_err(ret))
			sock_info(r, ARG1(regs), 0);
		break;
	case NR_sendmsg:
	case NR_sendmmsg: {
		r->op = OBS_OP_SENDTO;
		struct user_msghdr mh = {};
		/* sendmmsg: the first message's address (struct mmsghdr starts
		 * with its msghdr); later messages may name others. */
		if (bpf_probe_read_user(&mh, sizeof(mh), (const void *)ARG2(regs)))
			return 0;
		if (read_sockaddr(r, mh.msg_name, mh.msg_namelen))
			return 0;
		if (nr == NR_sendmmsg)
			r->flags = ARG3(regs); /* vlen */
		if (!is_sock_err(ret))
			sock_info(r, ARG1(regs), 0);
		break;
	}
	case NR_bind:
		r->op = OBS_OP_BIND;
		if (read_sockaddr(r, (const void *)ARG2(regs), ARG3(regs)))
			return 0;
		if (!is_sock_err(ret))
			sock_info(r, ARG1(regs), ret == 0 && r->family != AF_UNIX);
		break;
	case NR_listen:
		if (is_sock_err(ret))
			return 0;
		r->op = OBS_OP_LISTEN;
		sock_info(r, ARG1(regs), 1);
		if (!(r->kflags & OBS_F_ADDR))
			return 0; /* unix or other family: the bind was reported */
		break;
	case NR_io_uring_setup:
	case NR_io_uring_enter:
	case NR_io_uring_register:
		r->op = OBS_OP_IO_URING;
		r->fd = ARG1(regs);
		break;
	case NR_ioctl:
		/* Only a metadata ioctl gets this far (meta_ioctl_call). */
		r->op = OBS_OP_IOCTL;
		r->flags = (__u32)ARG2(regs); /* the command */
		fd_object(r, ARG1(regs));
		break;
	default:
		return 0;
	}

	rec_finish(r, s, s->rgen + obs_grgen);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(obs_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct obs_session *s;
	struct obs_rec *r = rec_begin(&s, OBS_OP_EXEC);
	if (!r)
		return 0;
	r->ppid = old_pid;
	const char *fn = BPF_CORE_READ(bprm, filename);
	const char *in = BPF_CORE_READ(bprm, interp);
	long n = bpf_probe_read_kernel_str(r->path0, sizeof(r->path0), fn);
	if (n > 0)
		r->len0 = n;
	else
		r->kflags |= OBS_F_FAULT0;
	if (in && in != fn) {
		n = bpf_probe_read_kernel_str(path1_at(r), OBS_PATH_MAX, in);
		if (n > 0)
			r->len1 = n;
	}
	struct inode *i = BPF_CORE_READ(bprm, file, f_inode);
	if (i) {
		inode_ident(i, &r->ino, &r->dev);
		r->kflags |= OBS_F_INO;
	}
	/* Not a script: path1 is free for the kernel's own name of the file
	 * loaded, taken now. The name the process passed may not name it
	 * (/proc/self/fd/N, /dev/fd/N, fexecve), and /proc/<pid>/exe is
	 * gone once a short program has exited, before user space reads it. */
	if (!r->len1) {
		struct file *bf = BPF_CORE_READ(bprm, file);
		kpath_file(p, r, bf);
		if (!r->len1)
			internal_name(r, bf);
	}
	/* A relative name resolves against the cwd, which exec keeps. */
	if (r->len0 > 1 && r->path0[0] != '/') {
		struct task_struct *t = bpf_get_current_task_btf();
		if (!base_ident(t, AT_FDCWD, &r->base_ino, &r->base_dev))
			r->kflags |= OBS_F_BASE;
	}
	rec_emit(r, s);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(obs_fork, struct task_struct *parent, struct task_struct *child)
{
	if (BPF_CORE_READ(child, pid) != BPF_CORE_READ(child, tgid))
		return 0; /* a thread */
	struct obs_session *s;
	struct obs_rec *r = rec_begin(&s, OBS_OP_FORK);
	if (!r)
		return 0;
	r->ppid = BPF_CORE_READ(parent, tgid);
	r->pid = BPF_CORE_READ(child, tgid);
	r->tid = BPF_CORE_READ(child, pid);
	rec_emit(r, s);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(obs_exit, struct task_struct *p)
{
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0; /* other threads of the process live on */
	struct obs_session *s;
	struct obs_rec *r = rec_begin(&s, OBS_OP_EXIT);
	if (!r)
		return 0;
	r->exit_code = BPF_CORE_READ(p, exit_code);
	rec_emit(r, s);
	return 0;
}
