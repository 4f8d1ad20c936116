// SPDX-License-Identifier: GPL-2.0
//
// looprelay: splices the two TCP sockets of a relayed loopback flow in the
// kernel (sockmap), so the relay's bytes never cross into user space.
//
// lr_socks holds both sockets of every spliced flow, keyed by socket
// cookie; lr_flows says, for each socket, its peer's cookie and what was
// received on it (and handed to the peer). The verdict program runs on
// every skb a socket of lr_socks receives: it counts it and redirects it
// to the peer's egress. Counting here, before the redirect, keeps the
// counts exact per flow and direction for the verification log and the
// egress budget (read by enforcer/looprelay).
//
// A socket whose flow entry is gone, or whose peer left the map, has its
// data dropped: the relay removes a flow only when it ends, and a flow
// half gone is being torn down (user space closes both sockets).
//
// Keep the struct layout and limits in step with enforcer/looprelay.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

// Limits (mirrored in enforcer/looprelay).
#define LR_MAX_SOCKS 16384

struct lr_flow {
	__u64 peer;    // the peer socket's cookie
	__u64 packets; // skbs received (and redirected)
	__u64 bytes;   // their bytes
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, LR_MAX_SOCKS);
	__type(key, __u64);
	__type(value, __u64);
} lr_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LR_MAX_SOCKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct lr_flow);
} lr_flows SEC(".maps");

SEC("sk_skb/stream_verdict")
int lr_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct lr_flow *f = bpf_map_lookup_elem(&lr_flows, &cookie);

	if (!f)
		return SK_DROP;
	// A FIN arrives as an skb of no data: the relay sees the half-close on
	// the socket and forwards it once the data before it was sent.
	if (skb->len == 0)
		return SK_DROP;
	__u32 len = skb->len;
	long verdict = bpf_sk_redirect_hash(skb, &lr_socks, &f->peer, 0);

	// Counted only when handed to the peer: what is dropped never left.
	if (verdict == SK_PASS) {
		__sync_fetch_and_add(&f->packets, 1);
		__sync_fetch_and_add(&f->bytes, len);
	}
	return verdict;
}
