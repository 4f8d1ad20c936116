// Package metaioctl lists the ioctls that change a file's metadata
// through a descriptor of it, for every layer that decides them: the
// seccomp filter (enforcer/launch/stage2), the tracepoint observer
// (enforcer/observe) and, through bpf/include/metaioctl.h, the BPF
// programs. It imports nothing: stage 2 stays small.
package metaioctl

// Ioctl is one ioctl that changes a file's metadata (its inode flags,
// its fsxattr, its generation, its on-disk format, its verity or
// encryption state) through a descriptor of the file. The descriptor may
// be read-only: the kernel asks only that the caller own the file, so a
// file wall that decides opens (Landlock) never sees it. Landlock
// mediates ioctls on devices only.
type Ioctl struct {
	Name string
	Cmd  uint32
}

// List is the metadata-changing ioctls an unprivileged owner can
// issue, with their 32-bit forms: the "long"-sized commands have a second
// number (FS_IOC32_*) that a 32-bit process sends and that some file
// systems accept natively. Commands that need CAP_SYS_ADMIN or
// CAP_LINUX_IMMUTABLE (file system labels and UUIDs, immutable and
// append-only flags: the agent has no capabilities) and commands that need
// a descriptor open for writing (EXT4_IOC_MOVE_EXT, FICLONE: the open was
// decided) are not listed. Keep bpf/include/metaioctl.h in step
// (TestListMatchesTheBPFHeader).
var List = []Ioctl{
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

// Name returns the ioctl's name, or "" when cmd is none of List.
func Name(cmd uint32) string {
	for _, m := range List {
		if m.Cmd == cmd {
			return m.Name
		}
	}
	return ""
}
