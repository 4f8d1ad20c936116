package stage2

// MetaIoctl is one ioctl that changes a file's metadata (its inode flags,
// its fsxattr, its generation, its on-disk format, its verity or
// encryption state) through a descriptor of the file. The descriptor may
// be read-only: the kernel asks only that the caller own the file, so a
// file wall that decides opens (Landlock) never sees it. Landlock
// mediates ioctls on devices only.
type MetaIoctl struct {
	Name string
	Cmd  uint32
}

// MetaIoctls are the metadata-changing ioctls an unprivileged owner can
// issue, with their 32-bit forms: the "long"-sized commands have a second
// number (FS_IOC32_*) that a 32-bit process sends and that some file
// systems accept natively. Commands that need CAP_SYS_ADMIN or
// CAP_LINUX_IMMUTABLE (file system labels and UUIDs, immutable and
// append-only flags: the agent has no capabilities) and commands that need
// a descriptor open for writing (EXT4_IOC_MOVE_EXT, FICLONE: the open was
// decided) are not listed. Keep bpf/include/metaioctl.h in step
// (TestMetaIoctlsMatchTheBPFHeader).
var MetaIoctls = []MetaIoctl{
	{"FS_IOC_SETFLAGS", 0x40086602},
	{"FS_IOC32_SETFLAGS", 0x40046602},
	{"FS_IOC_FSSETXATTR", 0x401c5820},
	{"FS_IOC_SETVERSION", 0x40087602},
	{"FS_IOC32_SETVERSION", 0x40047602},
	{"EXT4_IOC_SETVERSION", 0x40086604},
	{"EXT4_IOC32_SETVERSION", 0x40046604},
	{"EXT4_IOC_MIGRATE", 0x00006609},
	{"FS_IOC_ENABLE_VERITY", 0x40806685},
	{"FS_IOC_SET_ENCRYPTION_POLICY", 0x800c6613},
	{"BTRFS_IOC_SUBVOL_SETFLAGS", 0x4008941a},
}

// nrFileSetattr is file_setattr(2) (Linux 6.17), the same on x86_64 and
// aarch64 (the unified syscall table). It sets what FS_IOC_FSSETXATTR sets,
// by path; go-seccomp-bpf's tables predate it.
const nrFileSetattr = 469
