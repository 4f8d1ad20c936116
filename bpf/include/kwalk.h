/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kwalk.h: the kernel's path of a dentry, as d_path builds it, for programs
 * that cannot call bpf_d_path (tracepoints, non-sleepable LSM hooks).
 *
 * The walk climbs d_parent/d_name and crosses mounts (mnt_mountpoint,
 * mnt_parent) until it meets the task's root, writing names backwards into a
 * per-CPU scratch buffer. With vm == NULL it stops at the root of the
 * dentry's filesystem instead. Shared by observe.bpf.c and lsm.bpf.c so both
 * backends name objects identically; each object file gets its own scratch
 * map.
 *
 * Include after vmlinux.h and the libbpf headers.
 */
#ifndef KLOCK_KWALK_H
#define KLOCK_KWALK_H

#define KW_PATH_MAX 4096 /* PATH_MAX; a power of two (masks below) */
#define KW_DEPTH 64      /* path components walked */
#define KW_NAME_MAX 255  /* longest component (NAME_MAX) */

enum { KW_RUN = 0, KW_DONE, KW_FAIL };

/* A typed, read-only view of a kernel pointer (kfunc, 6.2+). Weak: on
 * older kernels the loader resolves it to 0, so every branch that tests
 * it first is dead there and its probe-read twin runs instead. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* The walk's state. It lives in the per-CPU buffer, not on the stack: the
 * verifier tracks no value in map memory, so every step of the bpf_loop
 * callback starts from the same abstract state and its verification
 * converges at once. On the stack, the position's bounds shrank a little
 * at every step and the callback was verified again for each (some 80k
 * instructions, most of a 300 ms load). */
struct kwalk {
	/* Kernel pointers, as numbers (the generated Go types have none). */
	__u64 d;       /* struct dentry * */
	__u64 vm;      /* struct vfsmount *; 0: stop at the filesystem root */
	__u64 m;       /* struct mount * */
	__u64 root_d;  /* struct dentry *: the task's root */
	__u64 root_vm; /* struct vfsmount * */
	__u64 mnt_root; /* vm's mnt_root, read once per mount crossed */
	__u32 pos;             /* start of the path in b */
	__u32 last;            /* position of the last '/' (before the final name) */
	__u32 state;
	__u32 _pad;
};

/* Names are written backwards from the middle, so every write stays inside
 * the buffer whatever the verifier knows about the position
 * (<= KW_PATH_MAX-1 + KW_NAME_MAX). */
struct kw_buf {
	char b[2 * KW_PATH_MAX];
	struct kwalk w;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kw_buf);
} kpbuf SEC(".maps");

static long kwalk_step(__u64 i, void *ctx)
{
	__u32 zero = 0;
	struct kw_buf *kb = bpf_map_lookup_elem(&kpbuf, &zero);
	if (!kb)
		return 1;
	struct kwalk *w = &kb->w;
	struct dentry *d = (struct dentry *)w->d;
	struct vfsmount *vm = (struct vfsmount *)w->vm;
	if (vm) {
		if (w->d == w->root_d && w->vm == w->root_vm) {
			w->state = KW_DONE;
			return 1;
		}
		if (w->d == w->mnt_root) {
			struct mount *m = (struct mount *)w->m;
			struct mount *p = BPF_CORE_READ(m, mnt_parent);
			if (!p || p == m) {
				/* The top of a mount tree without meeting the
				 * task's root: not reachable from it. */
				w->state = KW_FAIL;
				return 1;
			}
			w->d = (__u64)BPF_CORE_READ(m, mnt_mountpoint);
			w->m = (__u64)p;
			struct vfsmount *pvm = (struct vfsmount *)((char *)p + bpf_core_field_offset(struct mount, mnt));
			w->vm = (__u64)pvm;
			/* Not inside BPF_CORE_READ: an access to w in there
			 * would be relocated against the kernel's types, which
			 * have no struct kwalk. */
			w->mnt_root = (__u64)BPF_CORE_READ(pvm, mnt_root);
			return 0;
		}
	}
	struct dentry *parent;
	__u32 len;
	const unsigned char *name;
	if (bpf_rdonly_cast) {
		/* Direct, fault-safe loads through a typed view of the
		 * dentry (kernels >= 6.2; the cast costs nothing, it is a
		 * register move once verified). */
		struct dentry *dd = bpf_rdonly_cast(d, bpf_core_type_id_kernel(struct dentry));
		parent = dd->d_parent;
		len = dd->d_name.len;
		name = dd->d_name.name;
	} else {
		parent = BPF_CORE_READ(d, d_parent);
		/* The name's length and pointer in one read: struct qstr is
		 * { u64 hash_len (little-endian: hash, then len); name }. A
		 * type of our own, so that reading its fields is not
		 * relocated. */
		struct {
			__u64 hash_len;
			const unsigned char *name;
		} q;
		if (bpf_core_read(&q, sizeof(q), &d->d_name)) {
			w->state = KW_FAIL;
			return 1;
		}
		len = q.hash_len >> 32;
		name = q.name;
	}
	if (!parent || parent == d) {
		w->state = vm ? KW_FAIL : KW_DONE;
		return 1;
	}
	__u32 pos = w->pos;
	if (len == 0 || len > KW_NAME_MAX || pos < len + 1 || pos >= KW_PATH_MAX) {
		w->state = KW_FAIL;
		return 1;
	}
	pos -= len;
	/* Hide len from the compiler here: knowing it is <= KW_NAME_MAX, it
	 * would drop the mask and pass an unchecked copy of the register. */
	asm volatile("" : "+r"(len));
	if (bpf_probe_read_kernel(&kb->b[pos & (KW_PATH_MAX - 1)], len & KW_NAME_MAX, name)) {
		w->state = KW_FAIL;
		return 1;
	}
	pos -= 1;
	kb->b[pos & (KW_PATH_MAX - 1)] = '/';
	w->pos = pos;
	if (i == 0)
		w->last = pos;
	w->d = (__u64)parent;
	return 0;
}

/* kwalk_path walks from d (on mount vm, or to its filesystem's root when vm
 * is NULL). On success the NUL-terminated path starts at kb->b[*pos] and is
 * KW_PATH_MAX - *pos bytes long with its NUL; *last is the offset of its
 * last '/' from *pos. Returns the buffer, or NULL when the object has no
 * path the task can name (deleted, O_TMPFILE, outside its root, too deep or
 * too long). linked: refuse an unhashed (deleted) starting dentry. */
static __always_inline struct kw_buf *kwalk_path(struct task_struct *t, struct dentry *d, struct vfsmount *vm, __u32 *pos, __u32 *last, int linked)
{
	if (!d)
		return NULL;
	/* An unlinked object (deleted, O_TMPFILE) has no path. Callers naming
	 * a dentry being created (linked == 0) skip the check: the kernel asks
	 * the LSM before it hashes a new name (an in-lookup dentry). */
	if (linked && BPF_CORE_READ(d, d_parent) != d && !BPF_CORE_READ(d, d_hash.pprev))
		return NULL;
	__u32 zero = 0;
	struct kw_buf *kb = bpf_map_lookup_elem(&kpbuf, &zero);
	if (!kb)
		return NULL;
	struct kwalk *w = &kb->w;
	w->d = (__u64)d;
	w->vm = (__u64)vm;
	w->m = 0;
	w->root_d = 0;
	w->root_vm = 0;
	w->mnt_root = 0;
	if (vm) {
		w->mnt_root = (__u64)BPF_CORE_READ(vm, mnt_root);
		w->m = (__u64)vm - bpf_core_field_offset(struct mount, mnt);
		w->root_d = (__u64)BPF_CORE_READ(t, fs, root.dentry);
		w->root_vm = (__u64)BPF_CORE_READ(t, fs, root.mnt);
	}
	w->pos = KW_PATH_MAX - 1;
	w->last = KW_PATH_MAX - 1;
	w->state = KW_FAIL; /* unless a step finishes the walk */
	kb->b[KW_PATH_MAX - 1] = 0;
	bpf_loop(KW_DEPTH, kwalk_step, NULL, 0);
	if (w->state != KW_DONE)
		return NULL;
	__u32 p = w->pos, l = w->last;
	if (p == KW_PATH_MAX - 1) { /* the root itself */
		p -= 1;
		l = p;
		kb->b[KW_PATH_MAX - 2] = '/';
	}
	*pos = p & (KW_PATH_MAX - 1);
	*last = (l - p) & (KW_PATH_MAX - 1);
	return kb;
}

#endif
