//go:build linux

package detect

import (
	"os/exec"
	"strings"
)

// Containers says what klock gives a container in each of its two modes
// on this kernel: klock-runtime in front of the real OCI
// runtime, and OCI hooks alone (Podman's or CRI-O's hooks.d). Neither is
// needed by klock run, so neither decides strict mode's readiness.
func Containers(fileWall string) []Check {
	var runtimes []string
	for _, r := range []string{"runc", "crun"} {
		if p, err := exec.LookPath(r); err == nil {
			runtimes = append(runtimes, p)
		}
	}
	rt := Check{Name: "oci-runtime", Guarantee: Blocks}
	hook := Check{Name: "oci-hooks"}
	if len(runtimes) == 0 {
		rt.Why = "no OCI runtime (runc, crun) on PATH"
		rt.Fix = "install runc (apt install runc), then point your engine at klock-runtime (klock-runtime --help)"
		hook.Why, hook.Fix, hook.Guarantee = rt.Why, rt.Fix, Detects
		return []Check{rt, hook}
	}
	rt.OK, hook.OK = true, true
	rt.Detail = "klock-runtime in front of " + strings.Join(runtimes, ", ") + ": the spec rewritten (no capabilities, no_new_privs, non-root, klock's seccomp deny list), klock-stage2 first in the container raises "
	if fileWall == "bpf-lsm" {
		rt.Detail += "klock's seccomp filter; bpf-lsm decides the container's file operations from outside; cgroup-net its network; tracepoints delimit its history"
		hook.Guarantee = Blocks
		hook.Detail = "hooks.d (Podman, CRI-O): no klock code in the container; bpf-lsm decides its file operations before the effect, cgroup-net its network; its spec (capabilities, user, seccomp) is the engine's"
	} else {
		rt.Detail += "the Landlock wall and klock's seccomp filter before the entrypoint; tracepoints detect the rest, cgroup-net walls the network"
		hook.Guarantee = Detects
		hook.Detail = "hooks.d (Podman, CRI-O): no klock code in the container and no bpf-lsm here: the tracepoints detect an undeclared file operation after its effect, kill the container and roll its files back; cgroup-net walls the network"
		hook.Fix = "use klock-runtime (a wall inside the container), or boot with bpf in lsm= (klock doctor's bpf-lsm row) so hooks.d containers are walled before the effect"
	}
	return []Check{rt, hook}
}
