//go:build linux

package detect

// fileClasses are operation classes no file wall's open or path rules
// cover, and what each file wall guarantees for them here (wall: the
// Report's FileWall). They are statements about klock's design on the
// probed wall, not probes: the wall's own check says whether it works.
func fileClasses(wall string) []Check {
	ioctls := Check{Name: "meta-ioctls", OK: true, Used: true,
		Detail: "ioctls that change a file's metadata through any descriptor of it (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, FS_IOC_SETVERSION, ... and their 32-bit forms)"}
	maps := Check{Name: "exec-maps", OK: true, Used: true,
		Detail: "code mapped executable from a file without an exec (the dynamic loader run directly, dlopen, mprotect PROT_EXEC)"}
	if wall == "bpf-lsm" {
		ioctls.Guarantee = Blocks
		ioctls.Detail += ": bpf-lsm's file_ioctl decides each as MUTATES of the descriptor's file"
		maps.Guarantee = Blocks
		maps.Detail += ": bpf-lsm's mmap_file and file_mprotect decide them by the PROC rules and the baseline's library directories"
		return []Check{ioctls, maps}
	}
	ioctls.Guarantee = Blocks + " (no MUTATES declared) or " + Detects
	ioctls.Detail += ": seccomp refuses them when the manifest lets the agent change no file; otherwise the tracepoints report each as MUTATES of the descriptor's file"
	maps.Guarantee = Detects + " (the loader's exec only)"
	maps.Detail += ": Landlock does not mediate mappings; a direct exec of the dynamic loader is detected, a declared program's mapping of other code is not seen (bpf-lsm blocks it)"
	return []Check{ioctls, maps}
}
