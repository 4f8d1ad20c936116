//go:build linux

package launch

import (
	"errors"
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ProbeABI returns the kernel's Landlock ABI version, or an error wrapping
// ErrNoLandlock that says why there is none.
func ProbeABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, unix.ENOSYS):
		return 0, fmt.Errorf("%w: the kernel was built without CONFIG_SECURITY_LANDLOCK (ENOSYS)", ErrNoLandlock)
	case errors.Is(err, unix.EOPNOTSUPP):
		return 0, fmt.Errorf("%w: Landlock is built in but not enabled: add landlock to the lsm= boot parameter (EOPNOTSUPP)", ErrNoLandlock)
	case err != nil:
		return 0, fmt.Errorf("%w: %v", ErrNoLandlock, err)
	case v < 1:
		return 0, fmt.Errorf("%w: ABI version %d", ErrNoLandlock, v)
	}
	return v, nil
}

// buildRuleset creates the ruleset fd for plan: every rule's path is opened
// with O_PATH (by the caller's identity, before privileges are dropped) and
// its type checked against the plan.
func buildRuleset(plan *LandlockPlan) (int, error) {
	attr := ll.RulesetAttr{
		HandledAccessFS:  uint64(plan.HandledFS),
		HandledAccessNet: uint64(plan.HandledNet),
		Scoped:           plan.Scoped,
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("create ruleset (ABI %d, fs %s, net %s): %w", plan.ABI, plan.HandledFS, plan.HandledNet, err)
	}
	for _, r := range plan.Rules {
		if err := addPathRule(fd, r); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	for _, p := range plan.Ports {
		attr := ll.NetPortAttr{AllowedAccess: uint64(p.Rights), Port: uint64(p.Port)}
		if err := ll.LandlockAddNetPortRule(fd, &attr, 0); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("port %d %s: %w", p.Port, p.Rights, err)
		}
	}
	return fd, nil
}

func addPathRule(rulesetFD int, r WallRule) error {
	pfd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
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
	attr := ll.PathBeneathAttr{AllowedAccess: uint64(r.Rights), ParentFd: pfd}
	if err := ll.LandlockAddPathBeneathRule(rulesetFD, &attr, 0); err != nil {
		return fmt.Errorf("path %s rights %s: %w", r.Path, r.Rights, err)
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
	if err := ll.LandlockRestrictSelf(rulesetFD, 0); err != nil {
		return fmt.Errorf("restrict self: %w", err)
	}
	return nil
}
