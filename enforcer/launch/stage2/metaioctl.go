package stage2

// nrFileSetattr is file_setattr(2) (Linux 6.17), the same on x86_64 and
// aarch64 (the unified syscall table). It sets what FS_IOC_FSSETXATTR sets,
// by path; go-seccomp-bpf's tables predate it.
const nrFileSetattr = 469
