//go:build linux

package stage2

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// ContainerInit is klock-stage2 inside a container (klock-runtime made it
// the first of the container's process.args): with --klock-wall=FILE and
// "--" as its first arguments it reads the wall klock wrote for this
// container, enforces it (Landlock, and klock run's seccomp filter stacked
// on the container's own), and execs the rest: the entrypoint. It returns
// at once in any other process. A missing or unreadable wall is fatal
// (exit 125): the container would otherwise run with no wall at all.
func ContainerInit() {
	if len(os.Args) < 3 || !strings.HasPrefix(os.Args[1], WallFlag) || os.Args[2] != "--" {
		return
	}
	runtime.LockOSThread()
	if err := containerMain(strings.TrimPrefix(os.Args[1], WallFlag), os.Args[3:]); err != nil {
		fmt.Fprintf(os.Stderr, "klock-stage2: %v\n", err)
		os.Exit(FailExit)
	}
}

func containerMain(wallFile string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no entrypoint after --")
	}
	b, err := os.ReadFile(wallFile)
	if err != nil {
		return fmt.Errorf("no wall for this container (%v): klockd did not adopt it; klock-runtime's createRuntime hook must run before the container starts (is klockd running?)", err)
	}
	var w ContainerWall
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("wall %s: %v", wallFile, err)
	}
	if w.Protocol != Protocol {
		return fmt.Errorf("wall %s is of protocol %d, this klock-stage2 speaks %d: klock-runtime and klockd are of different builds; install them together", wallFile, w.Protocol, Protocol)
	}
	if w.Landlock == nil && w.By != "bpf-lsm" {
		return fmt.Errorf("wall %s names no wall (by %q)", wallFile, w.By)
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
	if w.Landlock != nil {
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
	path := args[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return fmt.Errorf("entrypoint %s: %v", args[0], err)
		}
	}
	return fmt.Errorf("exec %s: %v", path, unix.Exec(path, args, os.Environ()))
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
