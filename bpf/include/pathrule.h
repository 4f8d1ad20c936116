/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * pathrule.h: how a compiled path rule (struct klsm_rule, lsm.h) grants
 * access to the path it was found for, shared by every program that looks
 * paths up in a rules trie built by enforcer/lsm (lsm.bpf.c,
 * unixguard.bpf.c). The Go model is lookup in enforcer/lsm/compile.go.
 *
 * Include after lsm.h.
 */
#ifndef KLOCK_PATHRULE_H
#define KLOCK_PATHRULE_H

/* rule_grants: r is the longest entry matching a path whose last '/' is at
 * offset last. An exact entry, or a directory entry for the path's own
 * directory, grants its direct access; a directory entry further up
 * grants deeper (see enforcer/lsm/compile.go). */
static __always_inline __u8 rule_grants(const struct klsm_rule *r, __u32 last)
{
	if (r->kind == LSM_R_EXACT || r->keylen == last + 1)
		return r->direct;
	return r->deeper;
}

#endif
