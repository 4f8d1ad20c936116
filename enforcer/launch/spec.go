package launch

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/policy"
)

// Spec is everything Start needs to launch one agent.
type Spec struct {
	Ruleset *policy.Ruleset // compiled manifest (required)
	Group   *cgroup.Group   // the session cgroup; the agent is born in it (required)

	Path string   // executable: absolute, or looked up in Env's PATH as the agent
	Args []string // argv, Args[0] included (required)
	Env  []string // the agent's whole environment (nothing else is inherited)
	Dir  string   // working directory (default: Ruleset.Workdir, else /)

	User *Credential // who the agent runs as (required)

	// NewNetNS gives the agent a network namespace of its own with only a
	// loopback interface up. Without a NET intent (see NeedsNetNS) that is
	// its whole network; with some, the caller joins it to the host
	// (enforcer/netwall) through Pending.Pid's namespace before Release.
	NewNetNS bool
	// AllowIOURing lets the agent use io_uring. io_uring operations bypass
	// syscall-tracepoint observation, so only set it when declared.
	AllowIOURing bool
	// NoLandlock launches without a Landlock wall: the caller has another
	// backend that decides every file operation before its effect (bpf-lsm).
	NoLandlock bool
	// DenyMetaIoctls refuses the ioctls that change a file's metadata
	// (metaioctl.List: FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...) with
	// EPERM in the seccomp filter, before their effect. Landlock does not
	// mediate them on files: callers set it when no backend decides them
	// by path (see MetaIoctlsRefused).
	DenyMetaIoctls bool
	// TrapConnect makes every connect(2) of the agent wait for an answer
	// from the caller, through Process.ConnectListener (seccomp user
	// notification): the session hands the agent a socket of the host's
	// for a declared host loopback service (enforcer/looprelay).
	TrapConnect bool

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// ExtraFiles become fds 3, 4, ... of the agent (e.g. a guard socket).
	// They keep the access they were opened with.
	ExtraFiles []*os.File
	// Mask hides existing directories from the agent: an empty, read-only
	// tmpfs is mounted over each in the agent's mount namespace, so klock's
	// own state (<workdir>/.klock: backups, logs) is out of reach even when
	// the agent may change everything around it. Landlock cannot subtract a
	// path from a granted hierarchy; a mount can.
	Mask []string
	// ResolvConf, when set, is a file bind-mounted read-only over
	// /etc/resolv.conf in the agent's mount namespace (before Mask, so it
	// may live in a masked directory): the session's DNS proxy as the
	// agent's only name server.
	ResolvConf string
	// Binds are directories bind-mounted over others in the agent's mount
	// namespace (nosuid, nodev), before the Landlock rules are opened: a
	// session's private /tmp and /var/tmp. The Landlock plan looks at Src
	// for paths under Dst, which is what the agent will see there.
	Binds []Bind
	// Stage2 is the stage-2 binary to launch with (cmd/klock-stage2);
	// "" means klock-stage2 beside the running executable. It is used only
	// when fit to run as root (see Spawn), otherwise the running binary is
	// re-executed: stage 2 does the same either way, the small binary only
	// starts a few milliseconds sooner.
	Stage2 string
	// Canaries proves the walls before the agent runs (nil: no canary).
	Canaries *Canaries
}

// Bind is one of Spec.Binds: the host directory Src over Dst.
type Bind = stage2.Bind

// Credential is the identity of the agent's processes.
type Credential struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups (none by default)
	// AllowRoot must be true for UID 0: root is never the default.
	AllowRoot bool
}

// NeedsNetNS reports whether rs declares no NET intent, so the agent should
// get an empty network namespace.
func NeedsNetNS(rs *policy.Ruleset) bool { return len(rs.Net) == 0 }

// MetaIoctlsRefused reports whether a session with ruleset rs whose file
// backend does not decide metadata ioctls by path (lsm false: Landlock)
// and whose observer reports them (observed) should refuse them
// outright. It does when nothing the manifest declares may change a file
// (no MUTATES outside the baseline, whose MUTATES are root's device
// sinks): every such ioctl would be a violation, so it is refused before
// its effect instead of detected after it. With a MUTATES intent they go
// ahead and the observer decides each by the descriptor's path; without
// an observer they are refused whatever the manifest says.
func MetaIoctlsRefused(rs *policy.Ruleset, lsm, observed bool) bool {
	if lsm {
		return false // bpf-lsm's file_ioctl decides each by path
	}
	return !observed || !rs.DeclaresMutates()
}

// DefaultUser picks the agent's identity: the owner of workdir when that is
// not root, else the invoking user of sudo (SUDO_UID, SUDO_GID). It fails
// with ErrNoUser rather than defaulting to root.
func DefaultUser(workdir string) (*Credential, error) {
	return DefaultUserOf(workdir, os.Getenv("SUDO_UID"), os.Getenv("SUDO_GID"))
}

// DefaultUserOf is DefaultUser for a client whose SUDO_UID and SUDO_GID
// are sudoUID and sudoGID (klockd choosing for a klock run front).
func DefaultUserOf(workdir, sudoUID, sudoGID string) (*Credential, error) {
	if workdir != "" {
		if info, err := os.Stat(workdir); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
				return &Credential{UID: st.Uid, GID: st.Gid}, nil
			}
		}
	}
	uid, err1 := strconv.ParseUint(sudoUID, 10, 32)
	gid, err2 := strconv.ParseUint(sudoGID, 10, 32)
	if err1 == nil && err2 == nil && uid != 0 {
		return &Credential{UID: uint32(uid), GID: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("%w: workdir %q is owned by root and SUDO_UID is unset; pass a uid (--user), or --user 0 to run as root explicitly", ErrNoUser, workdir)
}

func (s *Spec) validate() error {
	switch {
	case s.Ruleset == nil:
		return fmt.Errorf("%w: no ruleset", ErrBadSpec)
	case s.Group == nil:
		return fmt.Errorf("%w: no session cgroup", ErrBadSpec)
	case len(s.Args) == 0:
		return fmt.Errorf("%w: no command (Args is empty)", ErrBadSpec)
	case s.User == nil:
		return fmt.Errorf("%w: Spec.User is nil", ErrNoUser)
	case s.User.UID == 0 && !s.User.AllowRoot:
		return ErrRootNotExplicit
	}
	return nil
}
