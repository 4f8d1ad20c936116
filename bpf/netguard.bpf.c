// SPDX-License-Identifier: GPL-2.0
//
// netguard: klock's per-session network wall (cgroup-net backend).
//
// The programs are loaded once and attached to every session cgroup. The
// decision comes from ng_policies, keyed by the session's cgroup id: a fixed
// array of rules scanned in a bounded loop. Whatever is not allowed by a rule
// returns 0 (the caller gets EPERM, before any packet leaves) and is reported
// on ng_events. A process whose cgroup (and every ancestor) has no policy is
// denied: the programs only run for sockets of attached cgroups, so a missing
// policy means a session being torn down or a broken setup; fail closed.
//
// Addresses are kept as four big-endian 32-bit words. IPv4 is stored in its
// IPv4-mapped form (::ffff:a.b.c.d) with family AF_INET, and an IPv6
// destination that is IPv4-mapped is checked as AF_INET: the v4 rules decide
// ::ffff:127.0.0.1 exactly as they decide 127.0.0.1, and a v6 rule such as
// [::/0] never matches an IPv4 destination (as in policy.Ruleset.Allows).
//
// Keep the constants and struct layouts in step with enforcer/netguard.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "cgscope.h"

char LICENSE[] SEC("license") = "GPL";

#define NG_AF_INET 2
#define NG_AF_INET6 10
#define NG_AF_PACKET 17

#define NG_SOCK_STREAM 1
#define NG_SOCK_DGRAM 2
#define NG_SOCK_RAW 3

#define NG_IPPROTO_ICMP 1
#define NG_IPPROTO_TCP 6
#define NG_IPPROTO_UDP 17
#define NG_IPPROTO_ICMPV6 58
#define NG_IPPROTO_UDPLITE 136
#define NG_IPPROTO_MPTCP 262

// Limits (mirrored in enforcer/netguard).
#define NG_MAX_RULES 256
#define NG_MAX_SESSIONS 1024

// Rule access bits.
#define NG_ACC_CONNECT 1 // CONSUMES: connect, sendto/sendmsg
#define NG_ACC_BIND 2    // PROVIDES: bind

// Policy flags.
#define NG_FLAG_RAW 1 // NET:raw declared: raw, packet and ICMP sockets allowed
// Report allowed operations too (a session whose file backend, bpf-lsm,
// leaves no syscall tracepoint to report them).
#define NG_FLAG_REPORT_ALLOWED 2

// Protocol classes (== policy.Proto, plus "other").
#define NG_PROTO_ANY 0
#define NG_PROTO_TCP 1
#define NG_PROTO_UDP 2
#define NG_PROTO_OTHER 3

// Hooks, reported in events.
enum ng_hook {
	NG_HOOK_CONNECT4 = 1,
	NG_HOOK_CONNECT6 = 2,
	NG_HOOK_SENDMSG4 = 3,
	NG_HOOK_SENDMSG6 = 4,
	NG_HOOK_BIND4 = 5,
	NG_HOOK_BIND6 = 6,
	NG_HOOK_SOCK_CREATE = 7,
};

struct ng_rule {
	__u32 addr[4]; // big-endian words, already masked
	__u32 mask[4];
	__u16 port_lo; // host order, inclusive
	__u16 port_hi;
	__u8 family; // NG_AF_INET or NG_AF_INET6
	__u8 proto;  // NG_PROTO_ANY, _TCP or _UDP
	__u8 access; // NG_ACC_*
	__u8 _pad;
};

struct ng_policy {
	__u32 n;     // rules in use
	__u32 flags; // NG_FLAG_*
	struct ng_rule rules[NG_MAX_RULES];
};

struct ng_event {
	__u64 cgroup_id;
	__u32 pid;
	__u32 tid;
	__u32 addr[4]; // big-endian words, as the caller passed them
	__u32 protocol; // the socket's protocol number
	__u16 port;     // host order
	__u16 family;   // address family the caller used
	__u16 sock_type;
	__u8 hook;    // enum ng_hook
	__u8 proto;   // NG_PROTO_*
	__u8 allowed; // 1: an allowed operation (NG_FLAG_REPORT_ALLOWED)
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NG_MAX_SESSIONS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); // cgroup id
	__type(value, struct ng_policy);
} ng_policies SEC(".maps");

// Events the ring buffer could not take, per session cgroup id.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NG_MAX_SESSIONS);
	__type(key, __u64);
	__type(value, __u64);
} ng_lost SEC(".maps");

// 4 MiB: with ReportAllowed every allowed datagram with an address is an
// event, and a loss fails a strict session closed.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} ng_events SEC(".maps");

// Force BTF for the types user space reads.
const struct ng_event *unused_ng_event __attribute__((unused));
const struct ng_policy *unused_ng_policy __attribute__((unused));

struct ng_session {
	__u64 id;
	struct ng_policy *pol;
};

// find_policy returns the policy of the current task's cgroup, or of its
// nearest ancestor that has one (a session may create sub-groups).
static __always_inline struct ng_session find_policy(void)
{
	struct ng_session s = {};
	s.pol = cg_lookup(&ng_policies, &s.id);
	return s;
}

// proto_class maps a socket to the transport NET rules name: TCP for
// stream sockets of TCP or MPTCP, UDP for datagram sockets of UDP or
// UDP-Lite; anything else (SCTP, ICMP, raw) is "other", which only a rule
// without a protocol matches at connect/sendmsg/bind, and which sock_create
// refuses unless NET:raw is declared.
static __always_inline __u8 proto_class(__u32 protocol, __u32 type)
{
	if (type == NG_SOCK_STREAM && (protocol == 0 || protocol == NG_IPPROTO_TCP ||
				       protocol == NG_IPPROTO_MPTCP))
		return NG_PROTO_TCP;
	if (type == NG_SOCK_DGRAM && (protocol == 0 || protocol == NG_IPPROTO_UDP ||
				      protocol == NG_IPPROTO_UDPLITE))
		return NG_PROTO_UDP;
	return NG_PROTO_OTHER;
}

static __always_inline void count_lost(__u64 id)
{
	__u64 one = 1;
	__u64 *v = bpf_map_lookup_elem(&ng_lost, &id);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	bpf_map_update_elem(&ng_lost, &id, &one, BPF_NOEXIST);
}

static __always_inline void report(__u64 id, __u8 hook, __u16 family, const __u32 a[4],
				   __u16 port, __u32 protocol, __u32 type, __u8 proto, __u8 allowed)
{
	struct ng_event *e = bpf_ringbuf_reserve(&ng_events, sizeof(*e), 0);
	if (!e) {
		count_lost(id);
		return;
	}
	__u64 pt = bpf_get_current_pid_tgid();
	e->cgroup_id = id;
	e->pid = pt >> 32;
	e->tid = (__u32)pt;
	e->addr[0] = a[0];
	e->addr[1] = a[1];
	e->addr[2] = a[2];
	e->addr[3] = a[3];
	e->protocol = protocol;
	e->port = port;
	e->family = family;
	e->sock_type = type;
	e->hook = hook;
	e->proto = proto;
	e->allowed = allowed;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

// The rule scan runs as a bpf_loop callback: the verifier checks one step,
// not each of NG_MAX_RULES unrolled iterations (a bounded loop cost some
// 30k instructions and 55 ms of verification per program, six programs at
// every load).
struct ng_scan {
	const struct ng_policy *p;
	__u32 a[4];
	__u32 n;
	__u16 port;
	__u8 family;
	__u8 proto;
	__u8 access;
	__u8 found;
};

static long scan_step(__u64 i, void *ctx)
{
	struct ng_scan *sc = ctx;
	if (i >= sc->n || i >= NG_MAX_RULES)
		return 1;
	const struct ng_rule *r = &sc->p->rules[i];
	if (!(r->access & sc->access) || r->family != sc->family)
		return 0;
	if (r->proto != NG_PROTO_ANY && r->proto != sc->proto)
		return 0;
	if (sc->port < r->port_lo || sc->port > r->port_hi)
		return 0;
	if ((sc->a[0] & r->mask[0]) != r->addr[0] || (sc->a[1] & r->mask[1]) != r->addr[1] ||
	    (sc->a[2] & r->mask[2]) != r->addr[2] || (sc->a[3] & r->mask[3]) != r->addr[3])
		return 0;
	sc->found = 1;
	return 1;
}

// allowed scans the session's rules for one that grants access to
// (family, a, port, proto). a is in mapped form for AF_INET.
static __always_inline int allowed(const struct ng_policy *p, __u8 family, const __u32 a[4],
				   __u16 port, __u8 proto, __u8 access)
{
	struct ng_scan sc = {
		.p = p, .n = p->n, .port = port, .family = family, .proto = proto, .access = access,
	};
	sc.a[0] = a[0];
	sc.a[1] = a[1];
	sc.a[2] = a[2];
	sc.a[3] = a[3];
	bpf_loop(NG_MAX_RULES, scan_step, &sc, 0);
	return sc.found;
}

static __always_inline int check4(struct bpf_sock_addr *ctx, __u8 hook, __u8 access)
{
	struct ng_session s = find_policy();
	__u32 a[4] = {0, 0, bpf_htonl(0xffff), ctx->user_ip4};
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	__u32 protocol = ctx->protocol, type = ctx->type;
	__u8 proto = proto_class(protocol, type);

	if (s.pol && allowed(s.pol, NG_AF_INET, a, port, proto, access)) {
		if (s.pol->flags & NG_FLAG_REPORT_ALLOWED)
			report(s.id, hook, NG_AF_INET, a, port, protocol, type, proto, 1);
		return 1;
	}
	report(s.id, hook, NG_AF_INET, a, port, protocol, type, proto, 0);
	return 0;
}

static __always_inline int check6(struct bpf_sock_addr *ctx, __u8 hook, __u8 access)
{
	struct ng_session s = find_policy();
	__u32 a[4];
	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	__u32 protocol = ctx->protocol, type = ctx->type;
	__u8 proto = proto_class(protocol, type);
	// ::ffff:a.b.c.d is an IPv4 destination: the v4 rules decide it.
	__u8 family = (a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff)) ? NG_AF_INET : NG_AF_INET6;

	if (s.pol && allowed(s.pol, family, a, port, proto, access)) {
		if (s.pol->flags & NG_FLAG_REPORT_ALLOWED)
			report(s.id, hook, NG_AF_INET6, a, port, protocol, type, proto, 1);
		return 1;
	}
	report(s.id, hook, NG_AF_INET6, a, port, protocol, type, proto, 0);
	return 0;
}

SEC("cgroup/connect4")
int ng_connect4(struct bpf_sock_addr *ctx)
{
	return check4(ctx, NG_HOOK_CONNECT4, NG_ACC_CONNECT);
}

SEC("cgroup/connect6")
int ng_connect6(struct bpf_sock_addr *ctx)
{
	return check6(ctx, NG_HOOK_CONNECT6, NG_ACC_CONNECT);
}

SEC("cgroup/sendmsg4")
int ng_sendmsg4(struct bpf_sock_addr *ctx)
{
	return check4(ctx, NG_HOOK_SENDMSG4, NG_ACC_CONNECT);
}

SEC("cgroup/sendmsg6")
int ng_sendmsg6(struct bpf_sock_addr *ctx)
{
	return check6(ctx, NG_HOOK_SENDMSG6, NG_ACC_CONNECT);
}

SEC("cgroup/bind4")
int ng_bind4(struct bpf_sock_addr *ctx)
{
	return check4(ctx, NG_HOOK_BIND4, NG_ACC_BIND);
}

SEC("cgroup/bind6")
int ng_bind6(struct bpf_sock_addr *ctx)
{
	return check6(ctx, NG_HOOK_BIND6, NG_ACC_BIND);
}

// sock_create runs for AF_INET and AF_INET6 sockets created by user space
// (the kernel calls it from inet_create/inet6_create only: AF_PACKET never
// reaches it). Only TCP/MPTCP stream and UDP/UDP-Lite datagram sockets are
// created without NET:raw: raw sockets, ICMP "ping" sockets (their sendto
// passes no cgroup sendmsg hook), SCTP and other transports whose traffic the
// connect/sendmsg hooks do not fully see are refused unless NET:raw is
// declared. The family check for AF_PACKET stays for kernels that may call
// the hook for more families.
SEC("cgroup/sock_create")
int ng_sock_create(struct bpf_sock *ctx)
{
	__u32 family = ctx->family, type = ctx->type, protocol = ctx->protocol;

	if (family != NG_AF_PACKET && proto_class(protocol, type) != NG_PROTO_OTHER)
		return 1;
	struct ng_session s = find_policy();
	__u32 a[4] = {};
	if (s.pol && (s.pol->flags & NG_FLAG_RAW)) {
		if (s.pol->flags & NG_FLAG_REPORT_ALLOWED)
			report(s.id, NG_HOOK_SOCK_CREATE, family, a, 0, protocol, type, NG_PROTO_OTHER, 1);
		return 1;
	}
	report(s.id, NG_HOOK_SOCK_CREATE, family, a, 0, protocol, type, NG_PROTO_OTHER, 0);
	return 0;
}
