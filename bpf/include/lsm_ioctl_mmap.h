/* SPDX-License-Identifier: GPL-2.0 */
/*
 * lsm_ioctl_mmap.h: the hooks of bpf/lsm.bpf.c that decide what a file
 * descriptor does without another path hook seeing it: metadata ioctls
 * (file_ioctl) and executable mappings (mmap_file, file_mprotect). A part
 * of lsm.bpf.c (included after check1 and check2, whose helpers it uses),
 * kept apart so the two evolve without stepping on each other.
 */
#ifndef KLOCK_LSM_IOCTL_MMAP_H
#define KLOCK_LSM_IOCTL_MMAP_H

#include "metaioctl.h"

#define PROT_EXEC 0x4

/* A metadata ioctl (metaioctl.h: FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...)
 * changes the file the descriptor names, which may be open read-only: it
 * is MUTATES of that file, decided as a chmod is (a file the session
 * created stays the session's to change). Every other ioctl is left alone
 * (terminals, sockets, devices: the open was decided). A 32-bit process
 * never gets here: the seccomp filter kills a foreign ABI, so
 * file_ioctl_compat (6.8) needs no program; the 32-bit command numbers are
 * listed anyway, for kernels before 6.8 that sent compat ioctls here. */
SEC("lsm/file_ioctl")
KLSM_PROG(klock_file_ioctl, struct file *file, unsigned int cmd, unsigned long arg, int ret)
{
	struct klsm_session *s;
	if (ret || !meta_ioctl(cmd) || !(s = armed()))
		return ret;
	return check1(s, LSM_OP_IOCTL, LSM_MUTATES, BPF_CORE_READ(file, f_path.dentry), BPF_CORE_READ(file, f_path.mnt), 1, 0);
}

/* map_exec decides an executable mapping of f (op: LSM_OP_MMAP_EXEC or
 * LSM_OP_MPROTECT_EXEC). Mapping a file's pages executable runs its code
 * without an exec (the dynamic loader run directly, dlopen, a loader of
 * one's own), so it is judged by the PROC rules, as an exec is, plus the
 * baseline's library directories (LSM_MAPEXEC: every dynamic program maps
 * its shared libraries, and python or node their extension modules, from
 * there). An allowed mapping is not reported: the exec that started the
 * program was, and a library is not an intent. A refused one is reported
 * as an exec of the file. */
static __always_inline int map_exec(struct klsm_session *s, __u32 op, struct file *f)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct klsm_event *e = begin(op, LSM_E_QUIET_OK);
	__u8 have = 0;
	__u32 n = name(t, s, e, 0, BPF_CORE_READ(f, f_path.dentry), BPF_CORE_READ(f, f_path.mnt), 1, &have);
	int deny = !n || !(have & (LSM_EXEC | LSM_MAPEXEC));
	if (!e)
		return finish(s, NULL, deny);
	e->need1 = LSM_EXEC;
	e->have1 = have;
	e->len1 = n;
	if (!n)
		e->flags |= LSM_E_NOPATH1;
	return finish(s, e, deny);
}

/* Every executable mapping on the machine comes here (each exec's and
 * each library's): anonymous memory and mappings without PROT_EXEC return
 * before the session lookup. Anonymous executable memory (JITs) names no
 * file and is out of any rule's reach. The kernel's own mappings of the
 * binary and its ELF interpreter at exec come here too, after
 * bprm_check_security armed the session. */
SEC("lsm/mmap_file")
KLSM_PROG(klock_mmap_file, struct file *file, unsigned long reqprot, unsigned long prot, unsigned long flags, int ret)
{
	struct klsm_session *s;
	if (ret || !file || !(prot & PROT_EXEC) || !(s = armed()))
		return ret;
	return map_exec(s, LSM_OP_MMAP_EXEC, file);
}

/* A mapping made readable first and executable later. */
SEC("lsm/file_mprotect")
KLSM_PROG(klock_file_mprotect, struct vm_area_struct *vma, unsigned long reqprot, unsigned long prot, int ret)
{
	struct klsm_session *s;
	if (ret || !(prot & PROT_EXEC))
		return ret;
	struct file *f = BPF_CORE_READ(vma, vm_file);
	if (!f || !(s = armed()))
		return ret;
	return map_exec(s, LSM_OP_MPROTECT_EXEC, f);
}

#endif
