//go:build linux

package stage2

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/klocklabs/klock/internal/brokenwall"
	"github.com/klocklabs/klock/internal/netnsdo"
	"golang.org/x/sys/unix"
)

// Init is where stage 2 runs: klock-stage2's main, and launch.Init in every
// binary that launches sessions (its re-executed self is stage 2 when no
// klock-stage2 is installed beside it). In any other process Init returns
// at once. In stage 2 it never returns: it execs the agent, or reports why
// it could not and exits.
//
// A process is stage 2 only when the _KLOCK_LAUNCH_STAGE2 variable names
// three file descriptors that are all pipes.
func Init() {
	v, ok := os.LookupEnv(EnvVar)
	if !ok {
		return
	}
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return
	}
	var fds [3]int
	for i, s := range parts {
		fd, err := strconv.Atoi(s)
		if err != nil || !isPipe(fd) {
			return
		}
		fds[i] = fd
	}
	runtime.LockOSThread() // everything below is per-thread; exec from this thread
	// The kernel names the process after the file exec'd: "exe", or "N"
	// for klock-stage2 exec'd as /proc/self/fd/N. The agent's exec reads
	// its ELF interpreter under this name, which the logs show.
	name := []byte("klock-stage2\x00")
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	err := runStage2(fds[0], fds[1], fds[2])
	if !errors.Is(err, errNotReleased) {
		report(fds[1], err)
	}
	os.Exit(FailExit)
}

// errNotReleased: the parent closed the go pipe without releasing the
// agent (it gave up on the session); nobody reads the status any more.
var errNotReleased = errors.New("stage 2: not released")

// awaitRelease blocks until the parent sends the byte that lets the agent
// start (Pending.Release).
func awaitRelease(goFD int) error {
	var b [1]byte
	for {
		n, err := unix.Read(goFD, b[:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			// The pipe may be non-blocking (the parent's side set it): wait
			// for it to become readable.
			fds := []unix.PollFd{{Fd: int32(goFD), Events: unix.POLLIN}}
			if _, perr := unix.Poll(fds, -1); perr != nil && perr != unix.EINTR {
				return fail("release", perr)
			}
			continue
		case err != nil:
			return fail("release", err)
		case n == 0:
			return errNotReleased
		}
		return nil
	}
}

// specFilter is the filter s asks for, assembled.
func specFilter(s *Spec) (filterOptions, []unix.SockFilter, error) {
	fo := filterOptions{allowIOURing: s.IOURing, denyMetaIoctls: s.DenyMetaIoctls, trapConnect: s.NotifyFD != 0}
	if fo.trapConnect && !isSocket(s.NotifyFD) {
		return fo, nil, fail("spec", fmt.Errorf("notify fd %d is not a socket", s.NotifyFD))
	}
	prog, err := seccompProgram(fo)
	if err != nil {
		return fo, nil, fail("seccomp", err)
	}
	return fo, prog, nil
}

// enforceSeccomp loads the filter; with the connect trap, it sends the
// filter's listener on notifyFD and closes both. A kernel that refuses
// the listener (before 5.0) gets the filter without the trap: the
// session finds no listener and relays by copying.
func enforceSeccomp(prog []unix.SockFilter, fo filterOptions, notifyFD int) error {
	if !fo.trapConnect {
		return loadSeccomp(prog)
	}
	defer unix.Close(notifyFD)
	lfd, err := loadSeccompListener(prog)
	if err == unix.EINVAL {
		fo.trapConnect = false
		if prog, err = seccompProgram(fo); err != nil {
			return err
		}
		return loadSeccomp(prog)
	}
	if err != nil {
		return err
	}
	defer unix.Close(lfd)
	// Not sent, the listener closes with stage 2 and every connect of the
	// agent fails (ENOSYS): refuse to start it so.
	if err := unix.Sendmsg(notifyFD, []byte{1}, unix.UnixRights(lfd), nil, 0); err != nil {
		return fmt.Errorf("send the connect listener: %w", err)
	}
	return nil
}

func isSocket(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// report writes err as JSON on the status pipe; the parent reads it as the
// reason Start fails.
func report(fd int, err error) {
	var se *failure
	if !errors.As(err, &se) {
		se = &failure{Step: "stage2", Msg: fmt.Sprint(err)}
	}
	b, _ := json.Marshal(se)
	_, _ = unix.Write(fd, b)
}

func fail(step string, err error) error {
	se := &failure{Step: step, Msg: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		se.Errno = errno
	}
	return se
}

// runStage2 returns only on failure.
func runStage2(specFD, statusFD, goFD int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &failure{Step: "stage2", Msg: fmt.Sprintf("panic: %v", r)}
		}
	}()
	f := os.NewFile(uintptr(specFD), "spec")
	var s Spec
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return fail("spec", err)
	}
	jerr := json.Unmarshal(data, &s)
	if s.Protocol != Protocol || s.Build != Build {
		// Checked first: another protocol's spec may not decode at all.
		exe, _ := os.Executable()
		return fail(StepBuild, fmt.Errorf("%s (protocol %d, build %q) is not from the build of the klock that launched it (protocol %d, build %q): install klock-stage2 from the same build, or remove it",
			exe, Protocol, Build, s.Protocol, s.Build))
	}
	if jerr != nil || (s.Landlock == nil) != s.NoLandlock {
		return fail("spec", fmt.Errorf("bad spec from parent: %v", jerr))
	}
	// Nothing but stdio and ExtraFiles may reach the agent; the status pipe
	// closes at exec, which tells the parent the agent started.
	if err := unix.CloseRange(uint(3+s.ExtraFiles), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail("fds", err)
	}
	// We were born in the session cgroup (CLONE_INTO_CGROUP); a cgroup
	// namespace rooted here hides everything above it.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fail("cgroupns", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("mount", fmt.Errorf("make / private: %w", err))
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail("mount", fmt.Errorf("proc on /proc: %w", err))
	}
	if err := mountViews(&s); err != nil {
		return err
	}
	if s.NewNetNS {
		if err := netnsdo.LoopbackUp(); err != nil {
			return fail("netns", err)
		}
	}
	fo, prog, err := specFilter(&s)
	if err != nil {
		return err
	}
	// Paths are opened while still root, so the wall does not depend on the
	// agent's permission to traverse to them.
	rulesetFD := -1
	if s.Landlock != nil {
		if rulesetFD, err = buildRuleset(s.Landlock); err != nil {
			return fail("landlock", err)
		}
	}
	if err := dropPrivileges(s.UID, s.GID, s.Groups); err != nil {
		return fail("credentials", err)
	}
	// The parent-death signal is cleared by a credential change: re-arm it.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fail("pdeathsig", err)
	}
	if err := unix.Chdir(s.Dir); err != nil {
		if errors.Is(err, unix.EACCES) {
			// The agent's user, not root, walks the path now.
			return fail("chdir", fmt.Errorf("%s: %w: the agent runs as uid %d, which cannot reach it: "+
				"give that user search permission on each directory of the path, or run the agent as a user who has it (klock run --user)", s.Dir, err, s.UID))
		}
		return fail("chdir", fmt.Errorf("%s: %w", s.Dir, err))
	}
	path, err := lookPath(s.Path, s.Env)
	if err != nil {
		return fail("exec", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs", err)
	}
	if rulesetFD >= 0 && !brokenwall.On {
		if err := restrictSelf(rulesetFD); err != nil {
			return fail("landlock", err)
		}
		unix.Close(rulesetFD)
	}
	if err := enforceSeccomp(prog, fo, s.NotifyFD); err != nil {
		return fail("seccomp", err)
	}
	// Everything above ran while the parent finished its own preparation;
	// the agent's first instruction waits for the parent's word.
	if err := awaitRelease(goFD); err != nil {
		return err
	}
	if s.Canary != nil {
		if err := runCanaries(s.Canary, s.Landlock != nil && s.Landlock.HandledNet != 0, statusFD); err != nil {
			return err
		}
	}
	err = syscall.Exec(path, s.Args, s.Env)
	fe := fail("exec", fmt.Errorf("%s: %w", path, err)).(*failure)
	fe.Path = path
	return fe
}

// mountViews mounts what the agent sees in its own mount namespace: the
// binds (a private /tmp), resolv.conf, the masks, the canaries' tmpfs; and
// sets vm.memfd_noexec. A failure is the step's (fail).
func mountViews(s *Spec) error {
	for _, b := range s.Binds {
		// Before the Landlock rules are opened: a rule on Dst then
		// attaches to Src's inode, which is what the agent reaches there.
		if err := bindDir(b.Src, b.Dst); err != nil {
			return fail("bind", err)
		}
	}
	if s.ResolvConf != "" {
		// Before the masks: the file lives in klock's state directory,
		// which a mask may hide; the bind keeps the file itself.
		if err := bindReadOnly(s.ResolvConf, "/etc/resolv.conf"); err != nil {
			return fail("resolv.conf", err)
		}
	}
	for _, p := range s.Mask {
		// Empty, read-only, mode 000: nothing to read, nowhere to write, and
		// the agent (no capabilities, umount denied by seccomp) cannot lift it.
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=000"); err != nil {
			return fail("mask", fmt.Errorf("%s: %w", p, err))
		}
	}
	if s.Landlock != nil && s.Landlock.MemfdNoexec {
		// Per pid namespace: memfds here can never be executed.
		if err := os.WriteFile(MemfdNoexecSysctl, []byte("2"), 0); err != nil {
			return fail("memfd_noexec", err)
		}
	}
	if s.Canary != nil {
		if err := makeCanaryDir(s.Canary); err != nil {
			return fail("canary-dir", err)
		}
	}
	return nil
}

// lookPath resolves name like execvp, with the agent's PATH and identity.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q: %w", name, pathVar, unix.ENOENT)
}

// bindDir mounts the directory src over dst, nosuid and nodev: the
// agent (no capabilities, mount and umount denied by seccomp) cannot lift
// it. Neither path may be a symbolic link: a link planted at either would
// put something else there.
func bindDir(src, dst string) error {
	for _, p := range []string{src, dst} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s: not a directory: %w", p, unix.ENOTDIR)
		}
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", src, dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make %s nosuid,nodev: %w", dst, err)
	}
	return nil
}

// bindReadOnly mounts the file src over dst, read-only: the agent (no
// capabilities, mount and umount denied by seccomp) cannot change or lift
// it.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", src, dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}
