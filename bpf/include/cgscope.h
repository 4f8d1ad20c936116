/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * cgscope.h: a session's entry in a map keyed by cgroup id, for programs
 * attached to a session cgroup (they run for its sub-groups too).
 * Shared by netguard.bpf.c and unixguard.bpf.c.
 *
 * Include after vmlinux.h and the libbpf headers.
 */
#ifndef KLOCK_CGSCOPE_H
#define KLOCK_CGSCOPE_H

#define CG_MAX_DEPTH 32

/* cg_lookup returns map's value for the current task's cgroup, or for its
 * nearest ancestor that has one (a session may create sub-groups), and
 * sets *id to the cgroup id it was found under (the task's own when none
 * was). map must be a map's address: the call is inlined, so the verifier
 * sees the map itself. */
static __always_inline void *cg_lookup(void *map, __u64 *id)
{
	__u64 cur = bpf_get_current_cgroup_id();
	void *v = bpf_map_lookup_elem(map, &cur);
	*id = cur;
	if (v)
		return v;
	for (int level = CG_MAX_DEPTH; level >= 1; level--) {
		__u64 anc = bpf_get_current_ancestor_cgroup_id(level);
		if (!anc)
			continue;
		v = bpf_map_lookup_elem(map, &anc);
		if (v) {
			*id = anc;
			return v;
		}
	}
	return NULL;
}

#endif
