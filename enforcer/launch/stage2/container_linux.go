//go:build linux

package stage2

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/klocklabs/klock/internal/brokenwall"
	"golang.org/x/sys/unix"
)

// ContainerInit is klock-stage2 inside a container (klock-runtime made it
// the first of the container's process.args): with --klock-wall=FILE,
// then for the entrypoint --klock-canary=PIPE, and "--" as its first
// arguments it reads the wall klock wrote for this container, enforces it
// (Landlock, and klock run's seccomp filter stacked on the container's
// own), proves it with the canaries the wall asks for (reported on PIPE),
// and execs the rest: the entrypoint. It returns at once in any other
// process. A missing or unreadable wall is fatal (exit 125): the
// container would otherwise run with no wall at all.
func ContainerInit() {
	if len(os.Args) < 3 || !strings.HasPrefix(os.Args[1], WallFlag) {
		return
	}
	args, report := os.Args[2:], ""
	if r, ok := strings.CutPrefix(args[0], CanaryFlag); ok {
		args, report = args[1:], r
	}
	if len(args) == 0 || args[0] != "--" {
		return
	}
	runtime.LockOSThread()
	if err := containerMain(strings.TrimPrefix(os.Args[1], WallFlag), report, args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "klock-stage2: %v\n", err)
		os.Exit(FailExit)
	}
}

func containerMain(wallFile, reportPipe string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no entrypoint after --")
	}
	w, err := readContainerWall(wallFile)
	if err != nil {
		return err
	}
	release, err := openRelease(w, wallFile)
	if err != nil {
		return err
	}
	canary, err := containerCanary(w, reportPipe)
	if err != nil {
		// A session that refused the container closed the canaries'
		// pipe: its release says why.
		if rerr := awaitContainerRelease(release); rerr != nil {
			return rerr
		}
		return err
	}
	// klock run's seccomp filter, stacked on the container's own (a
	// stacked filter can only narrow): namespace creation, io_uring,
	// ptrace, bpf, TIOCSTI, and the metadata ioctls when the manifest
	// lets the agent change no file.
	prog, err := seccompProgram(filterOptions{denyMetaIoctls: w.DenyMetaIoctls})
	if err != nil {
		return fmt.Errorf("seccomp: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %v", err)
	}
	if w.Landlock != nil && !brokenwall.On {
		// Rules whose path is missing, or a link or of another type now,
		// are dropped: the container's files as klock planned them were
		// seen from outside. Dropping a rule only narrows the wall.
		w.Landlock.Rules = reachableRules(w.Landlock.Rules)
		fd, err := buildRuleset(w.Landlock)
		if err != nil {
			return fmt.Errorf("landlock: %v", err)
		}
		if err := restrictSelf(fd); err != nil {
			return fmt.Errorf("landlock: %v", err)
		}
		unix.Close(fd)
	}
	if err := loadSeccomp(prog); err != nil {
		return fmt.Errorf("seccomp: %v", err)
	}
	if err := awaitContainerRelease(release); err != nil {
		if canary >= 0 {
			report(canary, err)
			_, _ = unix.Write(canary, []byte{'\n'})
		}
		return err
	}
	if canary >= 0 {
		// As klock run's stage 2: after every wall, before the
		// entrypoint. The pipe closes at its exec, or at stage 2's exit.
		if err := runCanaries(w.Canary, w.Landlock != nil && w.Landlock.HandledNet != 0, canary); err != nil {
			report(canary, err)
			_, _ = unix.Write(canary, []byte{'\n'})
			return err
		}
	}
	path := args[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return fmt.Errorf("entrypoint %s: %v", args[0], err)
		}
	}
	return fmt.Errorf("exec %s: %v", path, unix.Exec(path, args, os.Environ()))
}

// readContainerWall reads and checks the wall klock wrote for this
// container.
func readContainerWall(wallFile string) (*ContainerWall, error) {
	b, err := os.ReadFile(wallFile)
	if err != nil {
		return nil, fmt.Errorf("no wall for this container (%v): klockd did not adopt it; klock-runtime's createRuntime hook must run before the container starts (is klockd running?)", err)
	}
	var w ContainerWall
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("wall %s: %v", wallFile, err)
	}
	if w.Protocol != Protocol {
		return nil, fmt.Errorf("wall %s is of protocol %d, this klock-stage2 speaks %d: klock-runtime and klockd are of different builds; install them together", wallFile, w.Protocol, Protocol)
	}
	if w.Landlock == nil && w.By != "bpf-lsm" {
		return nil, fmt.Errorf("wall %s names no wall (by %q)", wallFile, w.By)
	}
	return &w, nil
}

// containerCanary opens the pipe the canaries are reported on and makes
// their files, before the walls go up (Landlock would refuse both
// afterwards; the canary tmpfs is the container's, mounted by its runtime
// and owned by its user). -1 when this stage 2 tries none: the wall asks
// for none, or this is a process exec'd into the container (no
// CanaryFlag), whose walls its entrypoint's canaries proved.
func containerCanary(w *ContainerWall, reportPipe string) (int, error) {
	if w.Canary == nil || reportPipe == "" {
		return -1, nil
	}
	// Non-blocking: with nobody reading, ENXIO, and the canaries would go
	// unreported: the entrypoint is not started.
	fd, err := unix.Open(reportPipe, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: the canaries' report pipe %s: %v (klockd reads it while the container starts: is its session still there?)", StepCanary, reportPipe, err)
	}
	if err := makeCanaryFiles(w.Canary.Dir); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %v (klock-runtime's spec mounts a tmpfs of the container user's there)", StepCanary, err)
	}
	return fd, nil
}

// reachableRules keeps the rules whose path stage 2 can open as planned.
func reachableRules(rules []WallRule) []WallRule {
	out := rules[:0]
	for _, r := range rules {
		fd, err := unix.Openat2(unix.AT_FDCWD, r.Path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
		if err != nil {
			continue
		}
		var st unix.Stat_t
		ok := unix.Fstat(fd, &st) == nil && (st.Mode&unix.S_IFMT == unix.S_IFDIR) == r.Dir
		unix.Close(fd)
		if ok {
			out = append(out, r)
		}
	}
	return out
}
