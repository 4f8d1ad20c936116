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
