package stage2

import (
	"fmt"
	"slices"
	"strings"
)

// FSRights is a set of Landlock file-system access rights (the
// LANDLOCK_ACCESS_FS_* bits).
type FSRights uint64

// NetRights is a set of Landlock network access rights
// (LANDLOCK_ACCESS_NET_*).
type NetRights uint64

// The LANDLOCK_ACCESS_NET_* bits klock uses (TCP; <linux/landlock.h>).
const (
	NetBindTCP    NetRights = 1 << 0
	NetConnectTCP NetRights = 1 << 1
)

// fsRightNames are the LANDLOCK_ACCESS_FS_* bits in order (bit i is
// fsRightNames[i]).
var fsRightNames = []string{
	"EXECUTE", "WRITE_FILE", "READ_FILE", "READ_DIR", "REMOVE_DIR", "REMOVE_FILE",
	"MAKE_CHAR", "MAKE_DIR", "MAKE_REG", "MAKE_SOCK", "MAKE_FIFO", "MAKE_BLOCK",
	"MAKE_SYM", "REFER", "TRUNCATE", "IOCTL_DEV", "RESOLVE_UNIX",
}

func (r FSRights) String() string {
	if r == 0 {
		return "none"
	}
	var parts []string
	for i, n := range fsRightNames {
		if r&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, "|")
}

// MarshalText renders the right names.
func (r FSRights) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r NetRights) String() string {
	var parts []string
	if r&NetBindTCP != 0 {
		parts = append(parts, "BIND_TCP")
	}
	if r&NetConnectTCP != 0 {
		parts = append(parts, "CONNECT_TCP")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// MarshalText renders the right names.
func (r NetRights) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads the form MarshalText writes.
func (r *FSRights) UnmarshalText(b []byte) error {
	*r = 0
	for _, n := range strings.Split(string(b), "|") {
		if n == "none" || n == "" {
			continue
		}
		i := slices.Index(fsRightNames, n)
		if i < 0 {
			return fmt.Errorf("unknown Landlock file-system right %q", n)
		}
		*r |= 1 << i
	}
	return nil
}

// UnmarshalText reads the form MarshalText writes.
func (r *NetRights) UnmarshalText(b []byte) error {
	*r = 0
	for _, n := range strings.Split(string(b), "|") {
		switch n {
		case "none", "":
		case "BIND_TCP":
			*r |= NetBindTCP
		case "CONNECT_TCP":
			*r |= NetConnectTCP
		default:
			return fmt.Errorf("unknown Landlock network right %q", n)
		}
	}
	return nil
}
