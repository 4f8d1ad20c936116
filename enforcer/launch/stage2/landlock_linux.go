//go:build linux

package stage2

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Landlock system calls are made here with x/sys alone: go-landlock's
// syscall package pulls in libcap's psx, which links the binary with cgo
// (libc, the dynamic loader), and that costs stage 2 start-up time.

// rulesetAttr is struct landlock_ruleset_attr up to scoped (ABI 6); the
// kernel accepts a longer struct than it knows when the excess is zero,
// and the plan never sets a field the running ABI lacks.
type rulesetAttr struct {
	handledFS, handledNet, scoped uint64
}

// netPortAttr is struct landlock_net_port_attr.
type netPortAttr struct {
	allowed, port uint64
}

const ruleNetPort = 2 // LANDLOCK_RULE_NET_PORT

// buildRuleset creates the ruleset fd for w: every rule's path is opened
// with O_PATH (by the caller's identity, before privileges are dropped) and
// its type checked against the plan.
func buildRuleset(w *Wall) (int, error) {
	attr := rulesetAttr{handledFS: uint64(w.HandledFS), handledNet: uint64(w.HandledNet), scoped: w.Scoped}
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return -1, fmt.Errorf("create ruleset (ABI %d, fs %s, net %s): %w", w.ABI, w.HandledFS, w.HandledNet, e)
	}
	fd := int(r)
	for _, r := range w.Rules {
		if err := addPathRule(fd, r); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	for _, p := range w.Ports {
		attr := netPortAttr{allowed: uint64(p.Rights), port: uint64(p.Port)}
		if err := addRule(fd, ruleNetPort, unsafe.Pointer(&attr)); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("port %d %s: %w", p.Port, p.Rights, err)
		}
	}
	return fd, nil
}

func addPathRule(rulesetFD int, r WallRule) error {
	// The plan has no link on any rule path (a rule through a link walls
	// whatever the link points at, and a link can be planted): one that
	// appeared since is refused here, not followed.
	pfd, err := unix.Openat2(unix.AT_FDCWD, r.Path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("path %s: %w (a symbolic link is on the path now, there was none when the ruleset was planned)", r.Path, err)
	}
	if err != nil {
		return fmt.Errorf("path %s: %w", r.Path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return fmt.Errorf("path %s: %w", r.Path, err)
	}
	if isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDir != r.Dir {
		return fmt.Errorf("path %s: %w (was a %s when the ruleset was planned)", r.Path, unix.ESTALE, kind(r.Dir))
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: uint64(r.Rights), Parent_fd: int32(pfd)}
	if err := addRule(rulesetFD, unix.LANDLOCK_RULE_PATH_BENEATH, unsafe.Pointer(&attr)); err != nil {
		return fmt.Errorf("path %s rights %s: %w", r.Path, r.Rights, err)
	}
	return nil
}

func addRule(rulesetFD, ruleType int, attr unsafe.Pointer) error {
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), uintptr(ruleType), uintptr(attr), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

func kind(dir bool) string {
	if dir {
		return "directory"
	}
	return "file"
}

// restrictSelf enforces the ruleset on the calling thread (no_new_privs
// must be set).
func restrictSelf(rulesetFD int) error {
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), 0, 0); e != 0 {
		return fmt.Errorf("restrict self: %w", e)
	}
	return nil
}
