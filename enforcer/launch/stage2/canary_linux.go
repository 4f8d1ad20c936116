//go:build linux

package stage2

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// makeCanaryDir mounts the canaries' own tmpfs on c.Dir in the agent's
// mount namespace (the host sees nothing of it) and makes the canaries'
// files there (makeCanaryFiles). The mount is neither noexec nor
// read-only: a refusal can only be a wall's. Run as root, before the
// Landlock rules are opened.
func makeCanaryDir(c *Canary) error {
	if err := unix.Mount("tmpfs", c.Dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4k,nr_inodes=4,mode=0755"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", c.Dir, err)
	}
	return makeCanaryFiles(c.Dir)
}

// makeCanaryFiles makes, in dir, the two objects the walls must refuse:
// CanaryWrite, a file everyone may write (0666), and CanaryExec, an empty
// file everyone may execute (0755). Their modes let the agent do both as
// far as owner and mode go, so a refusal can only be a wall's. Made
// before the walls go up.
func makeCanaryFiles(dir string) error {
	for name, mode := range map[string]uint32{CanaryWrite: 0o666, CanaryExec: 0o755} {
		p := filepath.Join(dir, name)
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		unix.Close(fd)
		if err := unix.Chmod(p, mode); err != nil { // past the umask
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// runCanaries tries, as the agent and under every wall, each operation c
// asks for, writes what happened on the status pipe (one JSON line the
// parent reads before the exec's EOF), and in strict mode fails when a
// wall let one through: the agent then never runs.
func runCanaries(c *Canary, landlockNet bool, statusFD int) error {
	var res []CanaryResult
	// The exec first, and always (judged only when asked): bpf-lsm arms
	// a session at its second exec, the first being stage 2's own, so
	// that stage 2's setup is not judged as the agent. This exec is that
	// second one: the write and the connect after it meet the armed wall.
	// An exec the wall lets through gets ENOEXEC: nothing runs.
	x := canaryExec(filepath.Join(c.Dir, CanaryExec), c.FileWall)
	if c.Exec {
		res = append(res, x)
	}
	if c.Write {
		res = append(res, canaryWrite(filepath.Join(c.Dir, CanaryWrite), c.FileWall))
	}
	if c.Connect != "" {
		res = append(res, canaryConnect(c.Connect, c.NetWall, landlockNet))
	}
	b, err := json.Marshal(CanaryReport{Canaries: res})
	if err != nil {
		return fail("canary", err)
	}
	if _, err := unix.Write(statusFD, append(b, '\n')); err != nil {
		return fail("canary", err)
	}
	if !c.Strict {
		return nil
	}
	var through []string
	for _, r := range res {
		if !r.Refused {
			through = append(through, r.String())
		}
	}
	if len(through) > 0 {
		var u unix.Utsname
		_ = unix.Uname(&u)
		return fail(StepCanary, fmt.Errorf("%w on kernel %s: %s", errWallNotEnforcing, unix.ByteSliceToString(u.Release[:]), strings.Join(through, "; ")))
	}
	return nil
}

// errWallNotEnforcing: a wall let its canary through.
var errWallNotEnforcing = errors.New("a wall is not enforcing")

// canaryWrite opens path for writing: the file wall must refuse it.
func canaryWrite(path, wall string) CanaryResult {
	r := CanaryResult{Kind: CanaryKindWrite, Target: path, Wall: wall}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	r.judge(err)
	return r
}

// canaryExec executes path, an empty file: the exec wall must refuse it
// (EACCES, EPERM). When no wall does, the kernel finds no format to load
// and answers ENOEXEC, so nothing runs either way.
func canaryExec(path, wall string) CanaryResult {
	r := CanaryResult{Kind: CanaryKindExec, Target: path, Wall: wall}
	err := unix.Exec(path, []string{path}, nil)
	if err == unix.ENOEXEC {
		err = nil // reached the loader: not refused
	}
	r.judge(err)
	return r
}

// canaryConnect starts a TCP connect to addr (non-blocking: a connect
// that goes out is never waited for): a network wall must refuse it
// before a packet leaves, and the errno says which: EACCES Landlock's TCP
// rights (landlockNet: the ruleset handles them), EPERM the wall the
// caller named (cgroup-net), ENETUNREACH the namespace's lack of a route.
func canaryConnect(addr, wall string, landlockNet bool) CanaryResult {
	r := CanaryResult{Kind: CanaryKindConnect, Target: addr, Wall: wall}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		r.Errno = "EINVAL"
		return r
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		r.judge(err)
		return r
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())})
	if err == unix.EINPROGRESS || err == unix.ECONNREFUSED {
		err = nil // it went out
	}
	if err == unix.ENETUNREACH || err == unix.EHOSTUNREACH {
		// No route out of the agent's namespace: it has no network.
		r.Refused, r.Errno, r.Wall = true, unix.ErrnoName(err.(unix.Errno)), "netns"
		return r
	}
	r.judge(err)
	if err == unix.EACCES && landlockNet {
		r.Wall = "landlock"
	}
	return r
}

// judge records err, the operation's outcome: refused when a wall's
// errno, else let through.
func (r *CanaryResult) judge(err error) {
	var errno unix.Errno
	if errors.As(err, &errno) {
		r.Errno = unix.ErrnoName(errno)
		r.Refused = errno == unix.EACCES || errno == unix.EPERM
		return
	}
	if err != nil {
		r.Errno = err.Error()
	}
}
