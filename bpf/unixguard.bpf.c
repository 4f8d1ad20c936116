// SPDX-License-Identifier: GPL-2.0
/*
 * unixguard.bpf.c: klock's wall for pathname AF_UNIX sockets where the file
 * wall is Landlock (which cannot wall them before its ABI 9) and the kernel
 * has the cgroup AF_UNIX address hooks (cgroup/connect_unix and
 * cgroup/sendmsg_unix, Linux 6.7+).
 *
 * The kernel runs the hooks before it looks the name up: from a stream or
 * datagram connect() (unix_stream_connect, unix_dgram_connect) and from
 * every datagram sent with an address (unix_dgram_sendmsg: sendto,
 * sendmsg, and each message of sendmmsg). A refusal (return 0) fails the
 * call with EPERM before any listener hears of it.
 *
 * A pathname socket is a FILE object: the call is CONSUMES of the socket's
 * path, as bpf-lsm (unix_stream_connect, unix_may_send) and the
 * tracepoints name it. The hooks see the name the caller gave, not the
 * inode it leads to, so the decision is by that name: an absolute name as
 * is, a relative one joined to the caller's working directory (its
 * kernel path, walked as kwalk.h walks every object). The path is looked
 * up in ug_rules, the session's rules compiled by enforcer/lsm (the same
 * LPM entries bpf-lsm uses), and the call goes ahead only when they grant
 * CONSUMES. A name with an empty, "." or ".." component is refused
 * whatever the rules say: lexically it is not the path the kernel will
 * reach. A name that reaches another socket through a symbolic link is
 * decided by the name; the tracepoints, which resolve it, detect the rest.
 * Abstract names (a leading NUL) are not files: Landlock's scope (ABI 6)
 * and the network namespace wall them; they pass here.
 *
 * Only refusals are reported (ug_events): in a Landlock session the
 * tracepoints report what goes ahead. Keep the layouts in step with
 * enforcer/unixguard.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "kwalk.h"
#include "lsm.h"
#include "pathrule.h"
#include "cgscope.h"

char LICENSE[] SEC("license") = "GPL";

#define UG_SUN_PATH 108 /* sizeof(sun_path) */
#define UG_MAX_SESSIONS 1024
#define UG_MAX_RULES 65536

enum ug_hook {
	UG_HOOK_CONNECT = 1, /* connect(): stream, seqpacket or datagram */
	UG_HOOK_SENDMSG = 2, /* a datagram sent with an address */
};

enum ug_event_flags {
	UG_E_UNCLEAN = 1 << 0, /* an empty, "." or ".." component, or a trailing '/' */
	UG_E_NOCWD = 1 << 1,   /* a relative name whose working directory has no name: path is the name alone */
	UG_E_NOADDR = 1 << 2,  /* the address could not be read */
};

/* A session's entry, keyed by its cgroup id. */
struct ug_session {
	__u32 sess; /* the rules' id in ug_rules (klsm_key.sess) */
	__u32 pad;
	__u64 lost; /* refusals the ring buffer could not take */
};

#define UG_PATH_MAX (2 * KW_PATH_MAX)

/* One refusal. path holds len bytes, its NUL included; only the header and
 * those bytes are sent. */
struct ug_event {
	__u64 cgroup_id;
	__u32 pid;
	__u32 tid;
	__u32 len;
	__u8 hook;  /* enum ug_hook */
	__u8 flags; /* enum ug_event_flags */
	__u8 have;  /* what the rules grant the path (LSM_* bits) */
	__u8 pad;
	char comm[16];
	char path[UG_PATH_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, UG_MAX_SESSIONS);
	__type(key, __u64);
	__type(value, struct ug_session);
} ug_sessions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, UG_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct klsm_key);
	__type(value, struct klsm_rule);
} ug_rules SEC(".maps");

/* The key scratch, with slack: the copy length is shown to the verifier
 * masked to 255 (see lookup below). */
struct ug_keybuf {
	struct klsm_key k;
	__u8 slack[24];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ug_keybuf);
} ug_keybuf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ug_event);
} ug_evbuf SEC(".maps");

/* Refusals only, and a strict session ends at the first: 1 MiB is
 * hundreds of full-length records. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} ug_events SEC(".maps");

/* Force BTF for the types user space reads. */
const struct ug_event *unused_ug_event __attribute__((unused));
const struct ug_session *unused_ug_session __attribute__((unused));
const struct klsm_key *unused_ug_key __attribute__((unused));
const struct klsm_rule *unused_ug_rule __attribute__((unused));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* The name being scanned (bpf_loop: one verification of the step, not one
 * per byte). */
struct ug_name {
	char p[128]; /* sun_path as passed */
	__u32 max;   /* bytes of sun_path the caller passed */
	__u32 len;   /* the name's length, without NUL */
	__u32 last;  /* offset of its last '/' */
	__u32 slash; /* it has a '/' */
	__u32 bad;   /* not a clean path (UG_E_UNCLEAN) */
};

/* byte: c->p[i & 127], the mask kept where the verifier sees it (the
 * compiler drops it when it knows a tighter bound, which the verifier
 * loses again). */
static __always_inline char byte(struct ug_name *c, __u32 i)
{
	asm volatile("%[i] &= 127" : [i] "+r"(i));
	return c->p[i];
}

static __always_inline char name_at(struct ug_name *c, __u32 i)
{
	return i < c->max ? byte(c, i) : 0;
}

static long name_step(__u32 i, struct ug_name *c)
{
	if (i >= UG_SUN_PATH || i >= c->max) {
		c->len = i;
		return 1;
	}
	char ch = byte(c, i);
	if (ch == 0) {
		c->len = i;
		return 1;
	}
	/* A component starts at 0 (a relative name) or after a '/'. */
	char prev = i ? byte(c, i - 1) : '/';
	if (prev == '/' && i > 0 && ch == '/')
		c->bad = 1; /* "//" */
	if (prev == '/' && ch == '.') {
		char n1 = name_at(c, i + 1);
		if (n1 == 0 || n1 == '/')
			c->bad = 1; /* "." */
		else if (n1 == '.') {
			char n2 = name_at(c, i + 2);
			if (n2 == 0 || n2 == '/')
				c->bad = 1; /* ".." */
		}
	}
	if (ch == '/') {
		c->last = i;
		c->slash = 1;
	}
	return 0;
}

/* lookup: what the session's rules grant the NUL-terminated path at
 * kb->b[pos] (total bytes with its NUL) whose last '/' is at offset last. */
static __always_inline __u8 lookup(__u32 sess, struct kw_buf *kb, __u32 pos, __u32 total, __u32 last)
{
	__u32 zero = 0;
	struct ug_keybuf *kbuf = bpf_map_lookup_elem(&ug_keybuf, &zero);
	if (!kbuf)
		return 0;
	struct klsm_key *k = &kbuf->k;
	/* Paths longer than a key are looked up by their first LSM_KEY_PATH
	 * bytes: exact, since every rule fits (enforcer/lsm refuses longer). */
	__u32 c = total > LSM_KEY_PATH ? LSM_KEY_PATH : total;
	asm volatile("%[c] &= 0xff" : [c] "+r"(c));
	if (c == 0)
		return 0;
	k->sess = sess;
	k->prefixlen = 32 + c * 8;
	if (bpf_probe_read_kernel(k->path, c, &kb->b[pos & (KW_PATH_MAX - 1)]))
		return 0;
	struct klsm_rule *r = bpf_map_lookup_elem(&ug_rules, k);
	return r ? rule_grants(r, last) : 0;
}

static __always_inline int refuse(struct ug_session *s, __u64 id, __u8 hook, __u8 flags, __u8 have, const char *src, __u32 len)
{
	__u32 zero = 0;
	struct ug_event *e = bpf_map_lookup_elem(&ug_evbuf, &zero);
	if (!e)
		return 0;
	__u64 pt = bpf_get_current_pid_tgid();
	e->cgroup_id = id;
	e->pid = pt >> 32;
	e->tid = (__u32)pt;
	e->hook = hook;
	e->flags = flags;
	e->have = have;
	e->len = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	len &= UG_PATH_MAX - 1;
	if (src && len && !bpf_probe_read_kernel(e->path, len, src))
		e->len = len;
	__u64 size = offsetof(struct ug_event, path) + e->len;
	if (size > sizeof(*e))
		size = sizeof(*e);
	if (bpf_ringbuf_output(&ug_events, e, size, BPF_RB_FORCE_WAKEUP) && s)
		__sync_fetch_and_add(&s->lost, 1);
	return 0;
}

static __always_inline int check(struct bpf_sock_addr *ctx, __u8 hook)
{
	__u64 id;
	struct ug_session *s = cg_lookup(&ug_sessions, &id);
	struct bpf_sock_addr_kern *sa = bpf_cast_to_kern_ctx(ctx);
	struct ug_name c = {};
	__u32 alen = sa->uaddrlen;
	if (alen <= 2)
		return 1; /* no name: the kernel refuses it (EINVAL) */
	c.max = alen - 2 > UG_SUN_PATH ? UG_SUN_PATH : alen - 2;
	if (bpf_probe_read_kernel(c.p, UG_SUN_PATH, (char *)sa->uaddr + 2))
		return refuse(s, id, hook, UG_E_NOADDR, 0, NULL, 0);
	if (c.p[0] == 0)
		return 1; /* abstract: not a file (see the top) */
	bpf_loop(UG_SUN_PATH + 1, name_step, &c, 0);
	__u32 n = c.len;
	if (n == 0 || n > UG_SUN_PATH)
		return 1; /* empty: the kernel refuses it */
	if (c.p[(n - 1) & 127] == '/')
		c.bad = 1;
	if (!s)
		/* Attached here, yet no rules: a session being torn down or a
		 * broken setup. Fail closed. */
		return refuse(s, id, hook, c.bad ? UG_E_UNCLEAN : 0, 0, c.p, n + 1);

	__u32 zero = 0;
	struct kw_buf *kb;
	__u32 pos, start, last;
	if (c.p[0] == '/') {
		kb = bpf_map_lookup_elem(&kpbuf, &zero);
		if (!kb)
			return 0;
		/* Where kwalk leaves a path: ending at the buffer's middle. */
		pos = KW_PATH_MAX - 1 - n;
		start = pos;
		last = c.last;
	} else {
		struct task_struct *t = (struct task_struct *)bpf_get_current_task();
		__u32 clast;
		kb = kwalk_path(t, BPF_CORE_READ(t, fs, pwd.dentry), BPF_CORE_READ(t, fs, pwd.mnt), &pos, &clast, 1);
		if (!kb)
			return refuse(s, id, hook, UG_E_NOCWD | (c.bad ? UG_E_UNCLEAN : 0), 0, c.p, n + 1);
		pos &= KW_PATH_MAX - 1;
		if (pos == KW_PATH_MAX - 2) {
			start = KW_PATH_MAX - 1; /* the cwd is "/" */
		} else {
			kb->b[KW_PATH_MAX - 1] = '/';
			start = KW_PATH_MAX;
		}
		last = c.slash ? start - pos + c.last : start - 1 - pos;
	}
	if (start > KW_PATH_MAX) /* never: bounds for the verifier */
		return 0;
	if (bpf_probe_read_kernel(&kb->b[start], n & 127, c.p))
		return 0;
	kb->b[(start + n) & (UG_PATH_MAX - 1)] = 0;
	__u32 total = start + n + 1 - pos;
	__u8 have = lookup(s->sess, kb, pos, total, last);
	if (!c.bad && (have & LSM_CONSUMES))
		return 1;
	return refuse(s, id, hook, c.bad ? UG_E_UNCLEAN : 0, have, &kb->b[pos & (KW_PATH_MAX - 1)], total);
}

SEC("cgroup/connect_unix")
int ug_connect_unix(struct bpf_sock_addr *ctx)
{
	return check(ctx, UG_HOOK_CONNECT);
}

SEC("cgroup/sendmsg_unix")
int ug_sendmsg_unix(struct bpf_sock_addr *ctx)
{
	return check(ctx, UG_HOOK_SENDMSG);
}
