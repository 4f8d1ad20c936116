// Package observe is klock's observation backend: BPF programs on raw
// syscall tracepoints (tp_btf/sys_exit) and the sched_process_exec/fork/exit
// tracepoints, and the user-space reader that turns their records into
// KLIS triples (event.Event) for each watched session cgroup.
//
// # What it owns
//
//   - bpf/observe.bpf.c and bpf/include/observe.h, and the committed
//     bpf2go output (observe_x86_bpfel.{go,o}, observe_arm64_bpfel.{go,o});
//     `go generate ./enforcer/observe` rebuilds them (clang, and
//     bpf/include/vmlinux.h from scripts/gen-vmlinux.sh, on an x86_64 host).
//   - Loading the programs once (Load) and sharing them between sessions:
//     Watch/Unwatch add and remove a cgroup id in the `watched` hash map.
//     The syscall program first looks at the syscall number: the many it
//     never records (read, write, close, stat...) return at once, for every
//     process; for the others, and in every other program (the ctime hooks
//     check the syscall first too), the current task's cgroup id is looked
//     up there, and other tasks return after that one lookup. The syscall
//     programs are attached only while a full Watch exists (a
//     ProcessEvents watch, for a bpf-lsm session, needs none): a syscall
//     tracepoint puts every syscall of every process through the kernel's
//     slow path.
//   - Repeated opens: a successful open of a file by path (not a creation,
//     not a directory) is reported once per object, flags and rename
//     generation of the session; its repeats are counted in the kernel
//     (`seen`) and handed over by Watch.Repeats at the end, so the counts
//     in the verification log stay exact. Reads below a directory: a
//     read-only open of a regular file with one name carries where its
//     file is (mount, task root); once the caller has judged such a read
//     below a directory and names it (Watch.CountBelow, map `subtree`),
//     the next such reads of files whose dentry has that directory (by
//     inode, on that mount, under that root) among its ancestors at the
//     open are counted, not reported, until Watch.TakeCounted takes the
//     count. Writes, creations, hard-linked files, other mounts and every
//     other operation are reported as before. Records carry only the path
//     bytes used, in one copy into the ring buffer (path1 is built right
//     after path0's bytes). The reader is woken once WakeupBytes are
//     pending or every PollInterval, except for records it should have at
//     once: a chmod, chown or xattr change (no wall blocks them) and an
//     operation a wall refused, which is how a violation usually shows
//     (Options.BatchUrgent turns that off, for tests). Syscalls the
//     programs do not record return before a record is prepared.
//   - The mapping of operations to triples (DESIGN.md's table) and the
//     resolution of path strings to the absolute, symlink-free paths the
//     kernel acted on.
//
// # What it never does
//
// It never decides and never blocks: it reports what happened. Whether a
// triple is allowed, and what to do about it (kill the cgroup, roll back,
// amend the scope), is the decision engine's job. It never changes a
// watched process, its cgroup or its files.
//
// # The guarantee: it DETECTS
//
// Records are produced at sys_exit, after the kernel acted (bpf_send_signal
// from sys_enter does not stop a syscall on this kernel either: measured).
// What it gives is a complete, ordered-per-thread account of the covered
// syscalls of every process in a watched cgroup, with the kernel's answer:
// Event.Errno is the errno (0 on success) and Event.Blocked is true when a
// kernel mechanism refused the operation (EACCES or EPERM: Landlock,
// cgroup-net, DAC). Blocking belongs to Landlock and cgroup-net. A call a
// signal interrupted while it waited (its exit carries a kernel restart
// code, ERESTARTSYS and kin, not an answer) is held until its thread's
// next record: the same syscall again is the call run again, and its
// record is the answer; anything else (or heldMax, 15 s, the process's
// exit, Sync) sends the held record with EINTR, what the program got.
//
// Covered: open/openat/openat2/creat/open_by_handle_at, mkdir(at),
// mknod(at), unlink(at), rmdir, rename/renameat/renameat2, link(at),
// symlink(at), truncate/ftruncate, chmod/fchmod/fchmodat/fchmodat2, the
// chown family, utime/utimes/futimesat/utimensat, the set/remove xattr
// families (incl. *xattrat), execve/execveat (success from
// sched_process_exec, failure from sys_exit), connect, sendto, sendmsg,
// sendmmsg (first message's address), bind, listen, socket (raw and packet
// only), ioctl with a command that changes its file's metadata
// (internal/metaioctl: FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...; reported as
// MUTATES of the descriptor's file, named by the kernel; every other ioctl
// returns on its command before the session lookup); fork and exit of
// whole processes. io_uring_setup/enter/register and
// any ia32 (32-bit) syscall are reported as KindUnobserved: operations they
// carry bypass the syscall tracepoints, so a session that sees one has lost
// completeness and should treat it as such (strict mode: a violation).
//
// Why sys_exit and not sys_enter: at sys_exit the arguments are still in the
// saved user registers and the strings in user memory, and they are
// resident (the kernel has just copied them), whereas
// bpf_probe_read_user_str at sys_enter fails on a page not yet faulted in
// (a fresh string constant), which would lose the path. One record per
// completed syscall, no per-thread in-flight state, and args changed by a
// seccomp tracer are seen as the kernel used them.
//
// Resident is not guaranteed: between the kernel's copy and sys_exit the
// page can leave the page tables (reclaim, compaction, the process's own
// madvise), and the BPF read, which cannot fault, finds nothing. The record
// then carries the string's user address, is sent at once, and user space
// reads it again from /proc/<tid>/mem (Record.NameReread), for the
// operations a kernel file wall mediates only (reread.go): the process
// could have rewritten it, and only a wall that judged the kernel's own
// copy backs such a name. A session with no file wall fails closed on it.
//
// # Paths, and the races in resolving them
//
// Where the kernel still holds the object at sys_exit, the BPF program
// records the kernel's own path of it (OBS_F_KPATH), built the way d_path
// and Tetragon build it: the struct path's dentry is walked up d_parent,
// copying each d_name (at most 64 components of at most 255 bytes, into a
// per-CPU scratch buffer, in a bpf_loop), crossing mounts through struct
// mount's mnt_parent/mnt_mountpoint, up to the task's own root (so the path
// is the one the process sees in its mount namespace; a path in the agent's
// procfs still becomes /proc/self/... through sessionProc). It does this
// for the file an open returned and for the fd argument of f* calls
// (fchmod, fchown, ftruncate, fsetxattr, futimens/utimensat(fd, NULL)). An
// unlinked object (O_TMPFILE, a deleted file), a disconnected dentry, an
// object not under the task's root, or a path too long or too deep gets no
// kernel path and is named as below. Such a path cannot be changed after
// the fact: a symlink on the string swapped or removed later does not
// matter.
//
// Path-based metadata calls (chmod, chown, utime(s)/utimensat, truncate,
// set/removexattr by name) have no fd. On kernels with the multigrain ctime
// tracepoints (6.13+: inode_set_ctime_to_ts, ctime_ns_xchg,
// ctime_xchg_skip; optional, Observer.CtimeHooks says whether they
// attached) the inode whose ctime the syscall changed is caught inside it
// and, at sys_exit, its (dev, ino) and the path of its dentry from its
// filesystem's root (OBS_F_KPATH_SB) are recorded. User space then requires
// the string to still lead to that inode (PathVerified); when it does not
// (a swapped symlink, or a relative name whose base the process has left
// since), it names the kernel's inode on a mount of its filesystem (from
// the process's mountinfo, checked with an lstat that must find the inode)
// as PathKernel, and PathBestEffort otherwise (the session fails closed on
// an unverified relative name). A name that no longer exists is judged by
// its base directory, as before. Without the hooks (6.1), these calls carry
// no inode, as before.
//
// The f* calls (fchmod, fchown, futimens, ftruncate, fsetxattr) carry the
// kernel's path of their fd's file (OBS_F_KPATH). An op whose only path is
// a relative name, and whose object has no kernel path of its own (mkdir,
// mknod, unlink, rmdir, a failed open, path-based metadata calls without a
// caught inode, a failed exec), carries the kernel's path of the directory
// the name started from, walked at sys_exit (OBS_F_KBASE): the name is
// joined to it instead of to a readlink of /proc/<pid>/cwd or fd/<dirfd>
// made after the fact, which cost a syscall per event and named wherever
// the process or directory had moved to since. One name whose last
// component is not followed is then the object itself, with no resolution.
//
// Otherwise the kernel names what it can by inode in each record: the file
// an open returned, the fd argument of f* calls, the dirfd or cwd a
// relative path started from, the binary an exec loaded (and its kernel
// path, walked at sched_process_exec: a program run through a descriptor,
// /proc/self/fd/N, is named by its file, a memfd by its name, though it
// exits before /proc/<pid>/exe can be read). User space then
// names that object, strongest first (Record.Path says which):
//
//   - PathKernel: the kernel's own path from the record (above), or
//     /proc/<pid>/fd/<n> or /proc/<pid>/exe, whose inode matched.
//   - PathVerified: the string resolved now (base dir from the kernel's
//     inode, then an O_PATH open that lets the kernel follow every
//     symlink), and the object's inode matched the kernel's record (or, for
//     a name that no longer / not yet exists, the base directory's did).
//   - PathBestEffort: nothing to check against, or a check failed.
//
// Races, honestly: string resolution happens after the syscall, in the
// reader. A process can close or reuse the fd (caught: inode mismatch),
// exit (its cwd is then taken from a cached directory inode or an ancestor
// with the same cwd inode), chdir, or change a symlink on the path between
// the syscall and the resolution; the inode checks catch what changed the
// object, not a symlink swapped to another name of the same inode (a hard
// link). A removed name (unlink, the source of a rename) cannot be checked
// against an inode: its parent is resolved and the name appended. Strings
// are resolved in the observer's mount namespace and root, kernel paths in
// the agent's: a session that gives the agent different mounts at the same
// paths makes them differ. The BPF walk takes no rename_lock (d_path
// retries under it): a directory renamed during the walk can give a torn
// path. The ctime hooks take the last ctime change of the syscall's thread
// (overlayfs changes the upper inode, then its own), and miss one in a
// rare cmpxchg race in inode_set_ctime_current. Without them (before
// 6.13) a path-based metadata change is judged by its name resolved after
// the fact: a relative name, or an absolute one that led through a
// symlink, is MetadataUnverified (strict fails closed); a
// /proc/self/fd/N/name is resolved through the fd as it is by then, so an
// agent that reuses the fd number in between is not caught. Another thread of the agent
// can rewrite a path buffer between the kernel's copy and ours (the same
// race exists at sys_enter, the other way round); the inode checks catch it
// for opens and exec.
// open(O_CREAT) is PROVIDES only when the kernel set FMODE_CREATED. A rename
// without RENAME_NOREPLACE/RENAME_EXCHANGE cannot tell whether it replaced
// its destination: Extra is MUTATES dst and Record.ReplaceUnknown is set
// (the session reads it as PROVIDES when its pre-flight backup says nothing
// was at dst).
//
// Not covered: data-path syscalls on already open fds (read, write, mmap,
// sendfile, splice, copy_file_range) are reported through the open that made
// the fd; fds received over unix sockets or inherited from outside the
// session; sends on connected sockets (reported at connect); nested cgroups
// created below a watched one (their id differs; the agent must not be able
// to create cgroups); processes moved out of the cgroup; ia32 syscalls on
// arm64 (aarch32) are not flagged; arm64 objects are compiled, not run here.
//
// # Errors and loss
//
// Load fails with an error wrapping ErrLoad when the programs cannot load
// (no BTF, no privileges, a verifier refusal, whose log it carries:
// enforcer/bpfprog), or with the attach's error; nothing is attached then.
// Watch fails for an already watched cgroup (ErrWatched) or a full map.
// Calls after Close return ErrClosed. Records are never silently dropped:
// when the kernel ring buffer is full the kernel counts the loss per
// session (and globally: LostTotal), and when a Watch's channel is full the
// reader counts it; either way the session receives a KindLost record with
// the count as soon as there is room. A strict session must treat any loss
// as fatal (fail closed). Sync waits until everything the kernel produced
// before the call has been delivered, so Sync then Unwatch after the
// agent's exit loses nothing.
package observe
