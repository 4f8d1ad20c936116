/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * metaioctl.h: the ioctls that change a file's metadata through a
 * descriptor of it (inode flags, fsxattr, generation, format, verity,
 * encryption policy), shared by bpf/lsm.bpf.c (file_ioctl decides them)
 * and bpf/observe.bpf.c (sys_exit reports them). The descriptor may be
 * read-only: the kernel asks only that the caller own the file. The
 * "long"-sized commands are listed with their 32-bit forms (FS_IOC32_*).
 * Keep in step with enforcer/launch/metaioctl.List (a Go test compares
 * the two).
 */
#ifndef KLOCK_METAIOCTL_H
#define KLOCK_METAIOCTL_H

#define KM_FS_IOC_SETFLAGS 0x40086602
#define KM_FS_IOC32_SETFLAGS 0x40046602
#define KM_FS_IOC_FSSETXATTR 0x401c5820
#define KM_FS_IOC_SETVERSION 0x40087602
#define KM_FS_IOC32_SETVERSION 0x40047602
#define KM_EXT4_IOC_SETVERSION 0x40086604
#define KM_EXT4_IOC32_SETVERSION 0x40046604
#define KM_EXT4_IOC_MIGRATE 0x00006609
#define KM_FS_IOC_ENABLE_VERITY 0x40806685
#define KM_FS_IOC_SET_ENCRYPTION_POLICY 0x800c6613
#define KM_BTRFS_IOC_SUBVOL_SETFLAGS 0x4008941a

static __always_inline int meta_ioctl(__u32 cmd)
{
	switch (cmd) {
	case KM_FS_IOC_SETFLAGS:
	case KM_FS_IOC32_SETFLAGS:
	case KM_FS_IOC_FSSETXATTR:
	case KM_FS_IOC_SETVERSION:
	case KM_FS_IOC32_SETVERSION:
	case KM_EXT4_IOC_SETVERSION:
	case KM_EXT4_IOC32_SETVERSION:
	case KM_EXT4_IOC_MIGRATE:
	case KM_FS_IOC_ENABLE_VERITY:
	case KM_FS_IOC_SET_ENCRYPTION_POLICY:
	case KM_BTRFS_IOC_SUBVOL_SETFLAGS:
		return 1;
	}
	return 0;
}

#endif
