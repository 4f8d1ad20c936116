//go:build linux

package stage2

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ProbeEnv marks the process klock starts to try a session's canaries
// from outside its agent (ProbeInit): a container adopted through OCI
// hooks alone runs no klock code of its own to try them with.
const ProbeEnv = "_KLOCK_CANARY_PROBE"

// ProbeInit is the canary probe when ProbeEnv is set (it exits), and
// returns at once otherwise. ProbeEnv's value is "CG,NET": the descriptor
// of the session's cgroup directory, which the probe joins, and of the
// network namespace it connects from (-1: its own). Its stdin carries
// its Canary (JSON, sent once the wall was told to decide for the
// probe); its stdout takes its report as stage 2's status pipe does: the
// canaries' line, then a strict refusal. Its mount namespace is its own (klock starts
// it with one): the canaries' tmpfs is mounted there, never where the
// container or the host would see it.
func ProbeInit() {
	v, ok := os.LookupEnv(ProbeEnv)
	if !ok {
		return
	}
	cg, netns, err := probeFDs(v)
	if err != nil {
		report(1, fail(StepCanary, err))
		os.Exit(FailExit)
	}
	runtime.LockOSThread() // the network namespace is this thread's
	if err := probeMain(cg, netns); err != nil {
		report(1, err)
		os.Exit(FailExit)
	}
	os.Exit(0)
}

// probeFDs reads ProbeEnv's "CG,NET".
func probeFDs(v string) (cg, netns int, err error) {
	a, b, _ := strings.Cut(v, ",")
	cg, err1 := strconv.Atoi(a)
	netns, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || cg < 0 {
		return 0, 0, fmt.Errorf("%s=%q: want CG,NET descriptors", ProbeEnv, v)
	}
	return cg, netns, nil
}

func probeMain(cg, netns int) error {
	var c Canary
	if err := json.NewDecoder(os.Stdin).Decode(&c); err != nil {
		return fail(StepCanary, fmt.Errorf("the probe's canaries: %v", err))
	}
	if c.Write || c.Exec {
		if err := makeCanaryDir(&c); err != nil {
			return fail(StepCanary, err)
		}
	}
	if c.Connect != "" && netns >= 0 {
		if !isNamespace(netns) {
			return fail(StepCanary, fmt.Errorf("descriptor %d is no namespace", netns))
		}
		if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
			return fail(StepCanary, fmt.Errorf("join the container's network namespace: %v", err))
		}
	}
	// Last: once in the cgroup, every operation is the session's.
	procs, err := unix.Openat(cg, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(StepCanary, fmt.Errorf("the session's cgroup: %v", err))
	}
	_, err = unix.Write(procs, []byte(strconv.Itoa(os.Getpid())))
	unix.Close(procs)
	if err != nil {
		return fail(StepCanary, fmt.Errorf("join the session's cgroup: %v", err))
	}
	return runCanaries(&c, false, 1)
}

// isNamespace reports whether fd is open on a namespace (nsfs).
func isNamespace(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && st.Type == unix.NSFS_MAGIC
}
