package oci

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// errnoRet is a fresh pointer each time: a caller editing one rule's
// errno must not edit another's.
func errnoRet(e unix.Errno) *uint {
	v := uint(e)
	return &v
}

// denies reports whether an action keeps the syscall from running. LOG
// allows; TRACE and NOTIFY hand the decision to another process that may
// allow it, so klock does not count them as denials.
func denies(a specs.LinuxSeccompAction) bool {
	switch a {
	case specs.ActErrno, specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap:
		return true
	}
	return false
}

// argRules are the argument-checked denials of stage 2's filter that a
// profile can express: clone and unshare with a namespace flag (one rule
// per flag: MASKED_EQ tests one mask, and rules are or-ed), and
// ioctl(TIOCSTI) (masked to the low 32 bits, which is all the kernel
// reads of an ioctl command, so high bits cannot slip past the compare).
// clone3 fails with ENOSYS as in stage 2 (its flags are in memory the
// filter cannot read; libc falls back to clone, which is checked).
//
// Not carried over: the metadata ioctls (stage 2 refuses them only when no
// backend decides them; the stage 2 inside the container adds them in its
// own filter), file_setattr's ENOSYS (newer than the seccomp tables of
// the runtimes in use), and the foreign-architecture kill (the runtime
// builds the filter for the architectures the profile lists). A stacked
// filter can only narrow, so stage 2 inside the container may add all of
// them later.
func argRules() []specs.LinuxSyscall {
	var out []specs.LinuxSyscall
	for _, name := range []string{"clone", "unshare"} {
		for _, f := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
			unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWTIME} {
			out = append(out, specs.LinuxSyscall{Names: []string{name}, Action: specs.ActErrno, ErrnoRet: errnoRet(unix.EPERM),
				Args: []specs.LinuxSeccompArg{{Index: 0, Value: f, ValueTwo: f, Op: specs.OpMaskedEqual}}})
		}
	}
	out = append(out,
		specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: errnoRet(unix.ENOSYS)},
		specs.LinuxSyscall{Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: errnoRet(unix.EPERM),
			Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: unix.TIOCSTI, Op: specs.OpMaskedEqual}}})
	return out
}

// MergeSeccomp returns the container's profile with deny (whole syscalls,
// EPERM) and klock's argument-checked rules merged in, never widening it:
// every syscall the profile denied stays denied, and every name in deny
// ends denied. The profile is not modified.
//
//   - no profile: default ALLOW, one ERRNO(EPERM) rule for deny, the
//     argument rules;
//   - a profile: a deny name the profile already denies unconditionally
//     keeps those rules (and leaves any rule that would allow it); every
//     other deny name is removed from all of the
//     profile's rules (so no ALLOW rule, conditional or not, can compete
//     with ours: libseccomp refuses or orders conflicting rules for one
//     syscall) and one ERRNO(EPERM) rule is added for them, unless the
//     default action already denies (then removal alone leaves them
//     denied);
//   - the argument rules are added only for syscalls the profile names in
//     no rule and whose default does not deny: a profile that already
//     decides clone, unshare, clone3 or ioctl keeps its own rules, because
//     mixing conditional rules of different actions on one syscall is
//     where runtimes disagree; stage 2 inside the container checks them
//     in its own stacked filter.
func MergeSeccomp(profile *specs.LinuxSeccomp, deny []string) *specs.LinuxSeccomp {
	if profile == nil {
		out := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
		if len(deny) > 0 {
			out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: slices.Clone(deny), Action: specs.ActErrno, ErrnoRet: errnoRet(unix.EPERM)})
		}
		out.Syscalls = append(out.Syscalls, argRules()...)
		return out
	}
	out := *profile
	out.Architectures = slices.Clone(profile.Architectures)
	out.Flags = slices.Clone(profile.Flags)
	already := map[string]bool{}
	named := map[string]bool{}
	for _, r := range profile.Syscalls {
		for _, n := range r.Names {
			named[n] = true
			if denies(r.Action) && len(r.Args) == 0 {
				already[n] = true
			}
		}
	}
	var need []string
	for _, n := range deny {
		if !already[n] && !slices.Contains(need, n) {
			need = append(need, n)
		}
	}
	out.Syscalls = nil
	for _, r := range profile.Syscalls {
		// need names leave every rule; the others (already denied
		// unconditionally) leave the rules that do not deny.
		drop := func(n string) bool {
			return slices.Contains(need, n) || (!denies(r.Action) && slices.Contains(deny, n))
		}
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), drop)
		if len(r.Names) == 0 {
			continue
		}
		r.Args = slices.Clone(r.Args)
		out.Syscalls = append(out.Syscalls, r)
	}
	defaultDenies := denies(profile.DefaultAction)
	if len(need) > 0 && !defaultDenies {
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: need, Action: specs.ActErrno, ErrnoRet: errnoRet(unix.EPERM)})
	}
	if !defaultDenies {
		for _, r := range argRules() {
			if !named[r.Names[0]] {
				out.Syscalls = append(out.Syscalls, r)
			}
		}
	}
	return &out
}
