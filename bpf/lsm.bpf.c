// SPDX-License-Identifier: GPL-2.0
/*
 * lsm.bpf.c: klock's BPF-LSM backend. It decides in the kernel, before the
 * effect, for every process of an agent's cgroup.
 *
 * Every hook starts with one hash lookup of the current cgroup v2 id in
 * lsm_sessions; other processes return at once. An armed session's
 * operation is named by the kernel's own path of the object (kwalk.h, the
 * same walk the tracepoint backend uses), looked up in lsm_rules (an LPM
 * trie keyed by session id + path bytes whose values already hold the union
 * of every covering rule, see enforcer/lsm/compile.go), and refused with
 * EPERM when the access it needs is not all granted. An object that has no
 * name the task can reach is refused (fail closed). Every decision is
 * reported on lsm_events; a record the ring buffer cannot take is counted
 * on the session (user space then fails closed in strict mode).
 *
 * io_uring operations reach the same hooks (file_open, path_*), so they
 * need no special case.
 *
 * Keep the layouts in step with bpf/include/lsm.h and enforcer/lsm.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "kwalk.h"
#include "lsm.h"
#include "pathrule.h"

char LICENSE[] SEC("license") = "GPL";

#define EPERM 1

/* KLSM_PROG defines an LSM program like libbpf's BPF_PROG (typed
 * arguments from the raw context), returning what its body returns as the
 * verifier checks an LSM program's exit since 6.9: a 64-bit value in
 * [-MAX_ERRNO, 0]. A body's int result (its ret argument passed on, a
 * helper's verdict) is sign-extended and clamped in 64 bits, behind a
 * barrier that keeps clang from narrowing the comparison back to the
 * 32-bit register the verifier sees zero-extended (0..0xffffffff: every
 * program was refused on 6.12). Anything outside the range, which no
 * hook returns, is a refusal. */
#define KLSM_MAX_ERRNO 4095
static __always_inline long klsm_ret(int v)
{
	long r = v;
	asm volatile("" : "+r"(r));
	if (r < -KLSM_MAX_ERRNO || r > 0)
		return -EPERM;
	return r;
}
#define KLSM_PROG(name, args...)					\
long name(unsigned long long *ctx);					\
static __always_inline int ____##name(unsigned long long *ctx, ##args);	\
long name(unsigned long long *ctx)					\
{									\
	_Pragma("GCC diagnostic push")					\
	_Pragma("GCC diagnostic ignored \"-Wint-conversion\"")		\
	return klsm_ret(____##name(___bpf_ctx_cast(args)));		\
	_Pragma("GCC diagnostic pop")					\
}									\
static __always_inline int ____##name(unsigned long long *ctx, ##args)
#define EXDEV 18
#define PIPEFS_MAGIC 0x50495045
#define SOCKFS_MAGIC 0x534F434B
#define PIDFS_MAGIC 0x50494446
#define FMODE_WRITE 0x2
#define FMODE_CREATED 0x100000
#define O_TMPFILE_DIR 020000000 /* __O_TMPFILE */
#define FMODE_EXEC_FLAG 0x20     /* __FMODE_EXEC in f_flags */
/* Internal event flag (never sent): report only a refusal. The kernel's
 * own open of a binary being executed is reported by the exec. */
#define LSM_E_QUIET_OK (1u << 31)
#define RENAME_EXCHANGE 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LSM_MAX_SESSIONS);
	__type(key, __u64);
	__type(value, struct klsm_session);
} lsm_sessions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, LSM_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct klsm_key);
	__type(value, struct klsm_rule);
} lsm_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} lsm_events SEC(".maps");

/* The key scratch has slack after the key: the verifier is shown a copy
 * length masked to 255 (the compiler drops a tighter clamp), so the copy
 * must fit 8 + 10 + 255 bytes. */
struct klsm_keybuf {
	struct klsm_key k;
	__u8 slack[24];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct klsm_keybuf);
} lsm_keybuf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct klsm_event);
} lsm_evbuf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct klsm_created);
	__type(value, __u8);
} lsm_created SEC(".maps");

/* The mount a session last reached each file system through (key: cgroup
 * id and super_block): the inode_* hooks name a dentry but no mount, and
 * the walk needs one. A wrong or stale guess cannot widen anything: a
 * dentry that is not below the mount's root has no name and is refused. */
struct klsm_sbkey {
	__u64 cgid;
	__u64 sb;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct klsm_sbkey);
	__type(value, __u64);
} lsm_mnts SEC(".maps");

/* Where the dentry is among the inode_* hooks' arguments on the running
 * kernel (6.3 put a struct mnt_idmap * before it): set by enforcer/lsm
 * from the kernel's BTF before loading; constants to the verifier. */
/* Allowed decisions wake the reader only once this much is waiting (0:
 * every record); refusals always wake it. Set by enforcer/lsm. */
volatile const __u64 wakeup_bytes = 0;

volatile const __u32 setattr_dentry_arg = 0;
volatile const __u32 setxattr_dentry_arg = 1;
volatile const __u32 removexattr_dentry_arg = 1;

/* Repeats of allowed opens, counted in the kernel instead of reported:
 * a program opening the same file a thousand times costs one record. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct klsm_seen_key);
	__type(value, __u64);
} lsm_seen SEC(".maps");

/* Force the generated Go types. */
const struct klsm_event *unused_event __attribute__((unused));
const struct klsm_rule *unused_rule __attribute__((unused));
const struct klsm_seen_key *unused_seen __attribute__((unused));

/* Processes klock runs in a session's cgroup to prove its wall before the
 * session is armed (the canaries of a container adopted through OCI hooks
 * alone, whose init is still the runtime's until it execs the
 * entrypoint): keyed by thread-group id, each decided as if the session
 * were armed, and its exec never counted towards arming. User space adds
 * one only for the probe's life. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} lsm_probes SEC(".maps");

static __always_inline bool probing(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	return bpf_map_lookup_elem(&lsm_probes, &tgid) != NULL;
}

static __always_inline struct klsm_session *armed_in(__u64 cgid)
{
	struct klsm_session *s = bpf_map_lookup_elem(&lsm_sessions, &cgid);
	if (!s)
		return NULL;
	/* The probe map is read only while a session arms: an armed
	 * session's hot path costs no more. */
	if (s->state != LSM_ARMED && !probing())
		return NULL;
	return s;
}

static __always_inline struct klsm_session *armed(void)
{
	return armed_in(bpf_get_current_cgroup_id());
}

/* proc_tail: for /proc/<digits>[/...] the offset (from pos) where the
 * tail ("/..." or the NUL) starts, else 0. The agent has its own pid
 * namespace and procfs, so every /proc/<n> is a process of the session:
 * it is looked up as /proc/self, as event.SessionProc names it. */
static __always_inline __u32 proc_tail(struct kw_buf *kb, __u32 pos)
{
	char h[6];
	pos &= KW_PATH_MAX - 1;
	if (bpf_probe_read_kernel(h, sizeof(h), &kb->b[pos]))
		return 0;
	if (h[0] != '/' || h[1] != 'p' || h[2] != 'r' || h[3] != 'o' || h[4] != 'c' || h[5] != '/')
		return 0;
	for (__u32 i = 6; i < 6 + 11; i++) {
		char ch = kb->b[(pos + i) & (2 * KW_PATH_MAX - 1)];
		if (ch >= '0' && ch <= '9')
			continue;
		if (i > 6 && (ch == '/' || ch == 0))
			return i;
		return 0;
	}
	return 0;
}

/* lookup_have: what the rules grant the path at kb->b[pos] whose last '/'
 * is at offset last. Returns -1 when the lookup could not be made. */
static __always_inline int lookup_have(__u32 sess, struct kw_buf *kb, __u32 pos, __u32 last, __u8 *have)
{
	__u32 zero = 0;
	struct klsm_keybuf *kbuf = bpf_map_lookup_elem(&lsm_keybuf, &zero);
	if (!kbuf)
		return -1;
	struct klsm_key *k = &kbuf->k;
	pos &= KW_PATH_MAX - 1;
	__u32 n = KW_PATH_MAX - pos; /* with the NUL */
	__u32 skip = proc_tail(kb, pos), head = 0;
	if (skip) {
		__builtin_memcpy(k->path, "/proc/self", 10);
		head = 10;
		n -= skip;
		last = last >= skip ? last - skip + head : 5;
	}
	__u32 c = n > LSM_KEY_PATH - head ? LSM_KEY_PATH - head : n;
	/* Hide c from the optimiser, then mask it where the verifier sees
	 * it: the copy below is provably <= 255 bytes (the slack covers it). */
	asm volatile("%[c] &= 0xff" : [c] "+r"(c));
	if (c == 0)
		return -1;
	k->sess = sess;
	k->prefixlen = 32 + (head + c) * 8;
	if (bpf_probe_read_kernel(&k->path[head & 15], c, &kb->b[(pos + skip) & (KW_PATH_MAX - 1)]))
		return -1;
	struct klsm_rule *r = bpf_map_lookup_elem(&lsm_rules, k);
	if (!r) {
		*have = 0;
		return 0;
	}
	*have = rule_grants(r, last);
	return 0;
}

/* name: walk d, look it up, and copy the path into the event at off.
 * Returns the bytes copied (0 when the object has no name). */
static __always_inline __u32 name(struct task_struct *t, struct klsm_session *s, struct klsm_event *e, __u32 off,
				  struct dentry *d, struct vfsmount *vm, int linked, __u8 *have)
{
	__u32 pos, last;
	*have = 0;
	struct kw_buf *kb = kwalk_path(t, d, vm, &pos, &last, linked);
	if (!kb)
		return 0;
	if (lookup_have(s->sess, kb, pos, last, have))
		return 0;
	if (vm) {
		struct klsm_sbkey sk = {.cgid = bpf_get_current_cgroup_id(), .sb = (__u64)BPF_CORE_READ(d, d_sb)};
		__u64 m = (__u64)vm;
		__u64 *old = bpf_map_lookup_elem(&lsm_mnts, &sk);
		if (!old || *old != m)
			bpf_map_update_elem(&lsm_mnts, &sk, &m, BPF_ANY);
	}
	__u32 n = KW_PATH_MAX - (pos & (KW_PATH_MAX - 1));
	if (n < 2 || n > KW_PATH_MAX)
		return 0;
	if (e && bpf_probe_read_kernel(&e->data[off & (LSM_PATH_MAX - 1)], n, &kb->b[pos & (KW_PATH_MAX - 1)]))
		return 0;
	return n;
}

static __always_inline struct klsm_event *begin(__u32 op, __u32 flags)
{
	__u32 zero = 0;
	struct klsm_event *e = bpf_map_lookup_elem(&lsm_evbuf, &zero);
	if (!e)
		return NULL;
	__u64 pt = bpf_get_current_pid_tgid();
	e->ts = bpf_ktime_get_boot_ns();
	e->cgid = bpf_get_current_cgroup_id();
	e->pid = pt >> 32;
	e->tid = (__u32)pt;
	e->op = op;
	e->flags = flags;
	e->need1 = e->have1 = e->need2 = e->have2 = 0;
	e->len1 = e->len2 = 0;
	__builtin_memset(&e->key, 0, sizeof(e->key));
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

/* finish: refuse or allow, and report. Both modes refuse: permissive
 * mode amends the rules from user space, so a retry goes through. */
static __always_inline int finish(struct klsm_session *s, struct klsm_event *e, int deny)
{
	int ret = deny ? -EPERM : 0;
	if (!e)
		return ret;
	if (!deny && (e->flags & LSM_E_QUIET_OK))
		return 0;
	e->flags &= ~LSM_E_QUIET_OK;
	if (deny)
		e->flags |= LSM_E_DENIED;
	__u64 size = offsetof(struct klsm_event, data) + (e->len1 & (LSM_PATH_MAX - 1)) + (e->len2 & (LSM_PATH_MAX - 1));
	if (size > sizeof(*e))
		size = sizeof(*e);
	/* A wake-up per record is a context switch per decision: allowed ones
	 * are batched (the reader also polls), refusals go at once. */
	__u64 wake = BPF_RB_FORCE_WAKEUP;
	if (!deny && wakeup_bytes && bpf_ringbuf_query(&lsm_events, BPF_RB_AVAIL_DATA) < wakeup_bytes)
		wake = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&lsm_events, e, size, wake))
		__sync_fetch_and_add(&s->lost, 1);
	return ret;
}

static __always_inline void created_key(struct klsm_created *k, struct inode *i)
{
	k->cgid = bpf_get_current_cgroup_id();
	k->ino = BPF_CORE_READ(i, i_ino);
	k->dev = BPF_CORE_READ(i, i_sb, s_dev);
	k->gen = BPF_CORE_READ(i, i_generation);
}

/* owned: whether the session created the inode d names. */
static __always_inline int owned(struct dentry *d)
{
	struct inode *i = d ? BPF_CORE_READ(d, d_inode) : NULL;
	if (!i)
		return 0;
	struct klsm_created k = {};
	created_key(&k, i);
	return bpf_map_lookup_elem(&lsm_created, &k) != NULL;
}

/* Renames that path_rename lets through, by any process on the machine
 * (a session's or not); part of every cache key. A renamed directory
 * changes the paths below it, and a rename from outside the session must
 * not leave the agent's opens of the new name counted under the old one.
 * The hook runs before the name moves; an open decided between the two
 * can still be cached under the old name. */
__u64 lsm_grgen = 0;

static __always_inline void seen_key(struct klsm_seen_key *sk, struct klsm_session *s, struct dentry *d, struct vfsmount *vm,
				     __u32 op, __u8 need)
{
	struct inode *i = BPF_CORE_READ(d, d_inode);
	sk->cgid = bpf_get_current_cgroup_id();
	sk->dent = (__u64)d;
	sk->mnt = (__u64)vm;
	sk->sess = s->sess;
	sk->rgen = lsm_grgen;
	sk->op = op;
	sk->need = need;
	if (i) {
		sk->ino = BPF_CORE_READ(i, i_ino);
		sk->gen = BPF_CORE_READ(i, i_generation);
	}
}

/* counted_op: operations whose triple is their need on the object alone
 * (an open for reading is CONSUMES of the file; an open for writing, a
 * truncate, chmod, chown, time or xattr change are all MUTATES of it):
 * once one is allowed and reported, the same need on the same object
 * (same name, rules and renames) is counted, whatever the hook. */
static __always_inline int counted_op(__u32 op, __u32 flags)
{
	if (flags & (LSM_E_QUIET_OK | LSM_E_TMPFILE | LSM_E_CREATED))
		return 0;
	switch (op) {
	case LSM_OP_OPEN:
	case LSM_OP_TRUNCATE:
	case LSM_OP_CHMOD:
	case LSM_OP_CHOWN:
	case LSM_OP_SETATTR:
	case LSM_OP_XATTR:
		return 1;
	}
	return 0;
}

/* unnamed: d's file has no name left (i_nlink 0: unlinked, or O_TMPFILE
 * never linked). A truncate or metadata change of it, through an fd the
 * process holds, reaches nothing outside the process and outlives it in
 * nothing (pytest's output capture truncates one): no scope is about it,
 * and giving it a name again (linkat) is decided by path_link. */
static __always_inline int unnamed(struct dentry *d)
{
	struct inode *i = BPF_CORE_READ(d, d_inode);
	return i && BPF_CORE_READ(i, __i_nlink) == 0;
}

static __always_inline int check1(struct klsm_session *s, __u32 op, __u8 need, struct dentry *d, struct vfsmount *vm, int linked, __u32 flags)
{
	struct task_struct *t = bpf_get_current_task_btf();
	if (op != LSM_OP_OPEN && counted_op(op, flags) && unnamed(d))
		return 0;
	if (op != LSM_OP_OPEN && counted_op(op, flags)) {
		/* Allowed before with the same name, rules and renames: count it
		 * (file_open looked already, with direct loads). */
		struct klsm_seen_key sk = {};
		seen_key(&sk, s, d, vm, 0, need);
		__u64 *cnt = bpf_map_lookup_elem(&lsm_seen, &sk);
		if (cnt) {
			__sync_fetch_and_add(cnt, 1);
			return 0;
		}
	}
	/* The open that follows a creation was decided and reported by
	 * path_mknod already: decide it again, report it once. */
	struct klsm_event *e = (flags & LSM_E_CREATED) ? NULL : begin(op, flags);
	__u8 have = 0;
	__u32 n = name(t, s, e, 0, d, vm, linked, &have);
	if (n && (need & ~have) && linked && owned(d)) {
		have |= LSM_CREATED_GRANTS;
		if (e)
			e->flags |= LSM_E_OWNED;
	}
	int deny = !n || (need & ~have);
	if (!deny && e && counted_op(op, flags)) {
		struct klsm_seen_key sk = {};
		seen_key(&sk, s, d, vm, 0, need);
		__u64 one = 1;
		/* A full table: report every open (exact counts either way). */
		if (!bpf_map_update_elem(&lsm_seen, &sk, &one, BPF_NOEXIST)) {
			e->flags |= LSM_E_COUNTED;
			e->key = sk;
		}
	}
	if (!e)
		return finish(s, NULL, deny);
	e->need1 = need;
	e->have1 = have;
	e->len1 = n;
	if (!n)
		e->flags |= LSM_E_NOPATH1;
	return finish(s, e, deny);
}

/* How check2 applies the REFER rule: a link (d1 is the new name, d2 the
 * existing one) or a rename (d1 is the old name, d2 the new one) must not
 * give the inode content rights its existing name lacks, unless the
 * session made the file (it has no pre-session state to protect). */
enum { REFER_NONE, REFER_LINK, REFER_RENAME };

/* check2: two objects (link, rename). */
static __always_inline int check2(struct klsm_session *s, __u32 op, __u32 flags, __u8 need1, struct dentry *d1, __u8 need2,
				  struct dentry *d2, struct vfsmount *vm, int refer)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u8 have1 = 0, have2 = 0;
	struct klsm_event *e;
	e = begin(op, flags);
	__u32 n1 = name(t, s, e, 0, d1, vm, 0, &have1);
	__u32 n2 = name(t, s, e, n1, d2, vm, 0, &have2);
	/* A link's new name is never the session's own file (decide's
	 * created.go): only a rename's source or destination may be. */
	if (n1 && (need1 & ~have1) && refer != REFER_LINK && owned(d1)) {
		have1 |= LSM_CREATED_GRANTS;
		flags |= LSM_E_OWNED;
	}
	if (n2 && (need2 & ~have2) && refer != REFER_LINK && owned(d2))
		have2 |= LSM_CREATED_GRANTS;
	int deny = !n1 || !n2 || (need1 & ~have1) || (need2 & ~have2);
	int widens = 0;
	if (refer == REFER_LINK)
		widens = (have1 & ~have2 & LSM_CONTENT) && !owned(d2);
	else if (refer == REFER_RENAME && !deny)
		widens = (have2 & ~have1 & LSM_CONTENT) && !owned(d1);
	if (!deny && widens)
		flags |= LSM_E_REFER;
	deny = deny || widens;
	int r;
	if (!e) {
		r = finish(s, NULL, deny);
		return r && (flags & LSM_E_REFER) ? -EXDEV : r;
	}
	e->flags = flags;
	e->need1 = need1;
	e->have1 = have1;
	e->need2 = need2;
	e->have2 = have2;
	e->len1 = n1;
	e->len2 = n2;
	if (!n1)
		e->flags |= LSM_E_NOPATH1;
	if (!n2)
		e->flags |= LSM_E_NOPATH2;
	r = finish(s, e, deny);
	return r && (flags & LSM_E_REFER) ? -EXDEV : r;
}

/* file_ioctl, mmap_file, file_mprotect: in their own file. */
#include "lsm_ioctl_mmap.h"

SEC("lsm/file_open")
KLSM_PROG(klock_file_open, struct file *file, int ret)
{
	if (ret)
		return ret;
	/* Every open on the machine comes here: one helper call for the
	 * cgroup id, kept for the cache key below. */
	__u64 cgid = bpf_get_current_cgroup_id();
	struct klsm_session *s = armed_in(cgid);
	if (!s)
		return 0;
	/* Direct loads from the hook's typed argument (no helper call per
	 * field): this is the path every repeated open takes. */
	__u32 fmode = file->f_mode;
	__u32 fflags = file->f_flags;
	struct dentry *d = BPF_CORE_READ(file, f_path.dentry);
	__u8 need = LSM_CONSUMES;
	__u32 flags = 0;
	if ((fflags & O_TMPFILE_DIR) && (fmode & FMODE_WRITE)) {
		/* An unnamed file in a directory: PROVIDES on the directory,
		 * as the tracepoint backend names it. */
		need = LSM_PROVIDES;
		flags = LSM_E_TMPFILE;
		d = BPF_CORE_READ(d, d_parent);
	} else if (fflags & FMODE_EXEC_FLAG) {
		flags = LSM_E_QUIET_OK;
	} else if (fmode & FMODE_WRITE) {
		if (fmode & FMODE_CREATED) {
			need = LSM_PROVIDES;
			flags = LSM_E_CREATED;
		} else {
			need = LSM_MUTATES;
		}
	}
	if (counted_op(LSM_OP_OPEN, flags)) {
		/* check1's cache lookup, with direct loads (check1 skips it for
		 * opens): the seen_key of the file's dentry and mount. */
		struct dentry *dd = file->f_path.dentry;
		struct inode *di = dd->d_inode;
		struct klsm_seen_key sk = {
			.cgid = cgid,
			.dent = (__u64)dd,
			.mnt = (__u64)file->f_path.mnt,
			.sess = s->sess,
			.rgen = lsm_grgen,
			.need = need,
		};
		if (di) {
			sk.ino = di->i_ino;
			sk.gen = di->i_generation;
		}
		__u64 *cnt = bpf_map_lookup_elem(&lsm_seen, &sk);
		if (cnt) {
			__sync_fetch_and_add(cnt, 1);
			return 0;
		}
	}
	/* An anonymous pipe or socket reopened through /proc/self/fd/N
	 * (bash's <(...) hands the agent /dev/fd/63): only a process that
	 * holds it can name it there, and it is no file of any file system,
	 * so no rule is about it (Landlock leaves it alone too). A named FIFO
	 * lives on a real file system and is decided as a file. A pidfd is
	 * the same kind of handle: from 6.9 the kernel opens it on pidfs
	 * through file_open, read-write, whenever a process is cloned with
	 * CLONE_PIDFD (Go's os/exec does) or pidfd_open is called. */
	__u64 magic = BPF_CORE_READ(file, f_inode, i_sb, s_magic);
	if (magic == PIPEFS_MAGIC || magic == SOCKFS_MAGIC || magic == PIDFS_MAGIC)
		return 0;
	struct vfsmount *vm = BPF_CORE_READ(file, f_path.mnt);
	int r = check1(s, LSM_OP_OPEN, need, d, vm, 1, flags);
	if (r == 0 && (flags & LSM_E_CREATED)) {
		struct klsm_created k = {};
		__u8 one = 1;
		created_key(&k, BPF_CORE_READ(file, f_inode));
		bpf_map_update_elem(&lsm_created, &k, &one, BPF_ANY);
	}
	return r;
}

SEC("lsm/bprm_check_security")
KLSM_PROG(klock_bprm_check, struct linux_binprm *bprm, int ret)
{
	if (ret)
		return ret;
	__u64 cgid = bpf_get_current_cgroup_id();
	struct klsm_session *s = bpf_map_lookup_elem(&lsm_sessions, &cgid);
	if (!s)
		return 0;
	/* A script's interpreter (a second round of the same exec): the
	 * kernel opens it for exec, and file_open checks that read. */
	if (BPF_CORE_READ(bprm, interp) != BPF_CORE_READ(bprm, filename))
		return 0;
	if (s->state != LSM_ARMED && !probing()) {
		if (__sync_fetch_and_add(&s->execs, 1) < 1)
			return 0; /* klock's own stage 2 */
		s->state = LSM_ARMED;
	}
	struct file *f = BPF_CORE_READ(bprm, file);
	return check1(s, LSM_OP_EXEC, LSM_EXEC, BPF_CORE_READ(f, f_path.dentry), BPF_CORE_READ(f, f_path.mnt), 1, 0);
}

SEC("lsm/path_mknod")
KLSM_PROG(klock_path_mknod, const struct path *dir, struct dentry *dentry, umode_t mode, unsigned int dev, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_MKNOD, LSM_PROVIDES, dentry, BPF_CORE_READ(dir, mnt), 0, 0);
}

SEC("lsm/path_mkdir")
KLSM_PROG(klock_path_mkdir, const struct path *dir, struct dentry *dentry, umode_t mode, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_MKDIR, LSM_PROVIDES, dentry, BPF_CORE_READ(dir, mnt), 0, 0);
}

SEC("lsm/path_symlink")
KLSM_PROG(klock_path_symlink, const struct path *dir, struct dentry *dentry, const char *old_name, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_SYMLINK, LSM_PROVIDES, dentry, BPF_CORE_READ(dir, mnt), 0, 0);
}

SEC("lsm/path_unlink")
KLSM_PROG(klock_path_unlink, const struct path *dir, struct dentry *dentry, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	int r = check1(s, LSM_OP_UNLINK, LSM_DELETES, dentry, BPF_CORE_READ(dir, mnt), 1, 0);
	struct inode *i = BPF_CORE_READ(dentry, d_inode);
	if (r == 0 && i && BPF_CORE_READ(i, __i_nlink) <= 1) {
		/* The last name goes: the inode (and its number) may be
		 * recycled, so it stops being the session's. */
		struct klsm_created k = {};
		created_key(&k, i);
		bpf_map_delete_elem(&lsm_created, &k);
	}
	return r;
}

SEC("lsm/path_rmdir")
KLSM_PROG(klock_path_rmdir, const struct path *dir, struct dentry *dentry, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_RMDIR, LSM_DELETES, dentry, BPF_CORE_READ(dir, mnt), 1, 0);
}

SEC("lsm/path_truncate")
KLSM_PROG(klock_path_truncate, const struct path *path, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_TRUNCATE, LSM_MUTATES, BPF_CORE_READ(path, dentry), BPF_CORE_READ(path, mnt), 1, 0);
}

SEC("lsm/path_chmod")
KLSM_PROG(klock_path_chmod, const struct path *path, umode_t mode, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_CHMOD, LSM_MUTATES, BPF_CORE_READ(path, dentry), BPF_CORE_READ(path, mnt), 1, 0);
}

SEC("lsm/path_chown")
KLSM_PROG(klock_path_chown, const struct path *path, unsigned int uid, unsigned int gid, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_CHOWN, LSM_MUTATES, BPF_CORE_READ(path, dentry), BPF_CORE_READ(path, mnt), 1, 0);
}

SEC("lsm/path_link")
KLSM_PROG(klock_path_link, struct dentry *old_dentry, const struct path *new_dir, struct dentry *new_dentry, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	/* The new name must be creatable and must not give more than the
	 * existing file already grants (no widening through a link). */
	return check2(s, LSM_OP_LINK, 0, LSM_PROVIDES, new_dentry, LSM_CONSUMES, old_dentry, BPF_CORE_READ(new_dir, mnt), REFER_LINK);
}

SEC("lsm/path_rename")
KLSM_PROG(klock_path_rename, const struct path *old_dir, struct dentry *old_dentry, const struct path *new_dir,
	     struct dentry *new_dentry, unsigned int flags, int ret)
{
	if (ret)
		return ret;
	/* Any rename on the machine, a session's or not, moves names the
	 * decision cache may hold (it is keyed by dentry, which a rename
	 * keeps): one that goes ahead bumps the global generation. */
	struct klsm_session *s = armed();
	if (!s) {
		__sync_fetch_and_add(&lsm_grgen, 1);
		return ret;
	}
	__u32 ef = 0;
	__u8 need2 = LSM_PROVIDES;
	if (flags & RENAME_EXCHANGE) {
		ef = LSM_E_EXCHANGE;
		need2 = LSM_MUTATES;
	} else if (BPF_CORE_READ(new_dentry, d_inode)) {
		ef = LSM_E_REPLACES;
		need2 = LSM_MUTATES;
	}
	int r = check2(s, LSM_OP_RENAME, ef, LSM_RENAMES, old_dentry, need2, new_dentry, BPF_CORE_READ(old_dir, mnt), REFER_RENAME);
	if (r == 0)
		/* Paths below a renamed directory changed: cached decisions go,
		 * this session's and every other's. */
		__sync_fetch_and_add(&lsm_grgen, 1);
	return r;
}

#define AF_UNIX 1
#define UNIX_PATH_MAX 108

/* An abstract AF_UNIX name lives outside every file system, so no FILE
 * intent can cover it, and no NET pattern names one: a connect to it is
 * always refused (Landlock ABI 6 scopes them the same way). Path names are
 * left to the file system (the tracepoints report them). */
/* check_unix_name decides a connect to an AF_UNIX socket by the absolute
 * name the caller gave, before the kernel looks it up: DAC may refuse the
 * lookup (a root-only socket) before unix_stream_connect names the object,
 * and the attempt must still be decided and reported. A name the rules
 * grant CONSUMES goes on to the object check in unix_stream_connect or
 * unix_may_send (a symlink could lead elsewhere); a name with "." or ".."
 * components or "//" is left to that check alone (lexically it is not the
 * path the kernel will reach). */
/* A unix socket name being scanned (bpf_loop: one verification of the
 * step, not one per length and slash position). */
struct uscan {
	char p[128];  /* sun_path, NUL-padded */
	__u32 max;    /* bytes of sun_path the caller passed */
	__u32 len;    /* the name's length (0: none found) */
	__u32 last;   /* offset of its last '/' */
	__u32 bad;    /* "//", "/." or "/..": not a clean absolute path */
};

static long uscan_step(__u32 i, struct uscan *c)
{
	if (i == 0)
		return 0;
	if (i >= UNIX_PATH_MAX || i >= c->max) {
		c->len = i;
		return 1;
	}
	char ch = c->p[i & 127], prev = c->p[(i - 1) & 127];
	if (ch == 0) {
		c->len = i;
		return 1;
	}
	if (prev == '/' && (ch == '/' || ch == '.')) {
		c->bad = 1;
		return 1;
	}
	if (ch == '/')
		c->last = i;
	return 0;
}

static __always_inline int check_unix_name(struct klsm_session *s, struct sockaddr *address, int addrlen)
{
	__u32 zero = 0;
	struct kw_buf *kb = bpf_map_lookup_elem(&kpbuf, &zero);
	if (!kb)
		return 0;
	struct uscan c = {};
	c.max = addrlen - 2;
	if (bpf_probe_read_kernel(c.p, UNIX_PATH_MAX, (char *)address + 2))
		return 0;
	bpf_loop(UNIX_PATH_MAX + 1, uscan_step, &c, 0);
	__u32 len = c.len, last = c.last;
	if (c.bad || len < 2 || len > UNIX_PATH_MAX || c.p[(len - 1) & 127] == '/')
		return 0;
	/* The name where kwalk leaves a path: ending at the buffer's middle,
	 * NUL included, so lookup_have reads it as it reads a walked path. */
	__u32 pos = KW_PATH_MAX - 1 - len;
	if (bpf_probe_read_kernel(&kb->b[pos & (KW_PATH_MAX - 1)], len & 127, c.p))
		return 0;
	kb->b[KW_PATH_MAX - 1] = 0;
	__u8 have = 0;
	if (lookup_have(s->sess, kb, pos, last, &have))
		return 0;
	if (have & LSM_CONSUMES)
		return 0;
	struct klsm_event *e = begin(LSM_OP_CONNECT_UNIX, 0);
	if (e) {
		e->need1 = LSM_CONSUMES;
		e->have1 = have;
		if (!bpf_probe_read_kernel(e->data, (len + 1) & 127, &kb->b[pos & (KW_PATH_MAX - 1)]))
			e->len1 = len + 1;
	}
	return finish(s, e, 1);
}

SEC("lsm/socket_connect")
KLSM_PROG(klock_socket_connect, struct socket *sock, struct sockaddr *address, int addrlen, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	if (addrlen < 3 || BPF_CORE_READ(address, sa_family) != AF_UNIX)
		return 0;
	char first = 1;
	bpf_probe_read_kernel(&first, 1, (char *)address + 2);
	if (first == '/')
		return check_unix_name(s, address, addrlen);
	if (first != 0)
		return 0;
	struct klsm_event *e = begin(LSM_OP_CONNECT_ABSTRACT, 0);
	if (e) {
		__u32 n = (addrlen - 3) & 127;
		e->data[0] = '@';
		if (n && bpf_probe_read_kernel(&e->data[1], n, (char *)address + 3))
			n = 0;
		e->data[(n + 1) & 255] = 0;
		e->len1 = n + 2;
	}
	return finish(s, e, 1);
}

#define AF_NETLINK 16
#define AF_PACKET 17
#define SOCK_RAW 3

/* Raw and packet sockets: refused unless NET:raw is declared, and reported
 * either way. The hook runs before the family's own create (and its
 * CAP_NET_RAW check), so even an attempt bound to fail is seen. A netlink
 * socket (SOCK_RAW too) talks to the kernel, not the network (glibc lists
 * the interfaces through one), and is none of them. */
SEC("lsm/socket_create")
KLSM_PROG(klock_socket_create, int family, int type, int protocol, int kern, int ret)
{
	struct klsm_session *s;
	if (ret || kern || !(s = armed()))
		return ret;
	if (family != AF_PACKET && ((type & 0xf) != SOCK_RAW || family == AF_NETLINK))
		return 0;
	struct klsm_event *e = begin(LSM_OP_SOCKET_RAW, 0);
	return finish(s, e, !(s->flags & LSM_S_RAW));
}

#define ATTR_MODE (1 << 0)
#define ATTR_UID (1 << 1)
#define ATTR_GID (1 << 2)
#define ATTR_SIZE (1 << 3)
#define ATTR_ATIME (1 << 4)
#define ATTR_MTIME (1 << 5)
#define ATTR_FORCE (1 << 9)

/* guess_mnt: the mount to name d through: the one the session last
 * reached d's file system by, else its cwd's, else its root's. */
static __always_inline struct vfsmount *guess_mnt(struct task_struct *t, struct dentry *d)
{
	struct super_block *sb = BPF_CORE_READ(d, d_sb);
	struct klsm_sbkey sk = {.cgid = bpf_get_current_cgroup_id(), .sb = (__u64)sb};
	__u64 *m = bpf_map_lookup_elem(&lsm_mnts, &sk);
	if (m && *m)
		return (struct vfsmount *)*m;
	struct vfsmount *v = BPF_CORE_READ(t, fs, pwd.mnt);
	if (v && BPF_CORE_READ(v, mnt_sb) == sb)
		return v;
	v = BPF_CORE_READ(t, fs, root.mnt);
	if (v && BPF_CORE_READ(v, mnt_sb) == sb)
		return v;
	return NULL;
}

static __always_inline int check_dentry_op(struct klsm_session *s, __u32 op, __u8 need, struct dentry *d)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct vfsmount *vm = guess_mnt(t, d);
	if (!vm) {
		/* No mount to name it through: refuse (fail closed). */
		struct klsm_event *e = begin(op, LSM_E_NOPATH1);
		if (e)
			e->need1 = need;
		return finish(s, e, 1);
	}
	return check1(s, op, need, d, vm, 1, 0);
}

static __always_inline int check_dentry(struct klsm_session *s, __u32 op, struct dentry *d)
{
	return check_dentry_op(s, op, LSM_MUTATES, d);
}

/* Time changes (utimes, touch) have no path hook. chmod, chown and
 * truncate reach inode_setattr too, after their path hooks decided them,
 * and writes clearing set-id bits (ATTR_FORCE) were decided at open. */
SEC("lsm/inode_setattr")
int klock_inode_setattr(unsigned long long *ctx)
{
	struct klsm_session *s = armed();
	if (!s)
		return 0;
	/* Fixed-offset loads, then a choice: the verifier refuses a ctx
	 * pointer moved by a computed offset. ctx[2] is the return value
	 * slot on kernels where the hook has two arguments. */
	unsigned long long a0 = ctx[0], a1 = ctx[1], a2 = ctx[2];
	asm volatile("" : "+r"(a0), "+r"(a1), "+r"(a2));
	struct dentry *d = (struct dentry *)(setattr_dentry_arg ? a1 : a0);
	struct iattr *a = (struct iattr *)(setattr_dentry_arg ? a2 : a1);
	__u32 valid = BPF_CORE_READ(a, ia_valid);
	if (!(valid & (ATTR_ATIME | ATTR_MTIME)) || (valid & (ATTR_MODE | ATTR_UID | ATTR_GID | ATTR_SIZE | ATTR_FORCE)))
		return 0;
	return check_dentry(s, LSM_OP_SETATTR, d);
}

SEC("lsm/inode_setxattr")
int klock_inode_setxattr(unsigned long long *ctx)
{
	struct klsm_session *s = armed();
	if (!s)
		return 0;
	unsigned long long a0 = ctx[0], a1 = ctx[1];
	asm volatile("" : "+r"(a0), "+r"(a1));
	struct dentry *d = (struct dentry *)(setxattr_dentry_arg ? a1 : a0);
	return check_dentry(s, LSM_OP_XATTR, d);
}

SEC("lsm/inode_removexattr")
int klock_inode_removexattr(unsigned long long *ctx)
{
	struct klsm_session *s = armed();
	if (!s)
		return 0;
	unsigned long long a0 = ctx[0], a1 = ctx[1];
	asm volatile("" : "+r"(a0), "+r"(a1));
	struct dentry *d = (struct dentry *)(removexattr_dentry_arg ? a1 : a0);
	return check_dentry(s, LSM_OP_XATTR, d);
}

/* A connect to (or datagram for) a socket with a file-system name is
 * CONSUMES of that file, as the tracepoint backend names it: the kernel
 * found the listener by its path, which the walk names. */
static __always_inline int check_unix_peer(struct klsm_session *s, struct sock *other)
{
	struct unix_sock *u = (struct unix_sock *)other;
	struct dentry *d = BPF_CORE_READ(u, path.dentry);
	if (!d)
		return 0; /* abstract or unnamed: socket_connect decided it */
	/* The peer's own mount is in its binder's mount namespace; the agent
	 * reached the same dentry through one of its own mounts. */
	return check_dentry_op(s, LSM_OP_CONNECT_UNIX, LSM_CONSUMES, d);
}

SEC("lsm/unix_stream_connect")
KLSM_PROG(klock_unix_stream_connect, struct sock *sock, struct sock *other, struct sock *newsk, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check_unix_peer(s, other);
}

SEC("lsm/unix_may_send")
KLSM_PROG(klock_unix_may_send, struct socket *sock, struct socket *other, int ret)
{
	struct klsm_session *s;
	if (ret || !(s = armed()))
		return ret;
	return check_unix_peer(s, BPF_CORE_READ(other, sk));
}
