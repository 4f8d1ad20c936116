package oci

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
)

// In-container paths of klock's state under Landlock (Plan.Landlock).
const (
	// StageDir is where Plan.StateDir is bind-mounted, read-only.
	StageDir = "/dev/.klock"
	// Stage2Path runs first in the container and raises the wall.
	Stage2Path = StageDir + "/klock-stage2"
	// WallPath is the wall stage 2 raises (written by klock-runtime).
	WallPath = StageDir + "/wall.json"
	// CanaryReportPath is the pipe the entrypoint's stage 2 reports its
	// canaries on (statedir.CanaryFileName).
	CanaryReportPath = StageDir + "/" + CanaryFileName
	// NobodyID is the uid and gid a root container runs as unless root
	// is allowed.
	NobodyID = 65534
)

// Plan says how Rewrite edits a spec.
type Plan struct {
	// KlockPath is the host path of the klock binary the hooks run.
	KlockPath string
	// StateDir is the host directory bound at /dev/.klock (klock-stage2,
	// wall.json); required with Landlock.
	StateDir string
	// Landlock prefixes process.args with stage 2, which raises the
	// Landlock wall (and its own seccomp filter) before the entrypoint.
	Landlock bool
	// AllowRoot keeps uid/gid 0 (see AllowRoot).
	AllowRoot bool
	// Workdir is the manifest's workdir, a container path; its .klock is
	// covered by a read-only tmpfs. Empty: none.
	Workdir string
	// ManifestAnnotation is the io.klock.manifest value the hooks read
	// (Found.Annotation).
	ManifestAnnotation string
}

// Rewrite edits spec in place so that the container runs under klock:
//
//   - hooks: createRuntime "klock oci-hook createRuntime" and poststop
//     "klock oci-hook poststop", after the container's own;
//   - annotations: io.klock.manifest = p.ManifestAnnotation and
//     io.klock.runtime = klock-runtime;
//   - process.noNewPrivileges; all five capability sets empty (a nil
//     capabilities object would leave the runtime's defaults);
//   - uid/gid 0 become 65534 (and gid 0 leaves additionalGids) unless
//     p.AllowRoot;
//   - seccomp: stage 2's deny list merged in, never widening (MergeSeccomp);
//   - a read-only, empty tmpfs over <workdir>/.klock: the backups and the
//     session's state are klock's, not the agent's (mounts the spec had
//     there or below are removed, and so are those at /dev/.klock);
//   - with p.Landlock, p.StateDir bound read-only at /dev/.klock (after
//     the /dev mount, which would hide it), process.args prefixed with
//     /dev/.klock/klock-stage2 --klock-wall=/dev/.klock/wall.json
//     --klock-canary=/dev/.klock/canary --, and the canaries' tmpfs
//     (4 KiB, owned by process.user, neither noexec nor read-only: a
//     refusal there can only be a wall's) mounted last at
//     stage2.CanaryDir, where stage 2 makes the canaries' files.
//
// It validates spec and p first and changes nothing when either is
// unusable (ErrBadSpec). It is idempotent: rewriting a rewritten spec
// with the same Plan changes nothing (an annotation saying the spec was
// rewritten is never trusted: every step is applied again).
func Rewrite(spec *specs.Spec, p Plan) error {
	if err := check(spec, p); err != nil {
		return err
	}
	if spec.Hooks == nil {
		spec.Hooks = &specs.Hooks{}
	}
	spec.Hooks.CreateRuntime = appendHook(spec.Hooks.CreateRuntime, specs.Hook{Path: p.KlockPath, Args: []string{"klock", "oci-hook", "createRuntime"}})
	spec.Hooks.Poststop = appendHook(spec.Hooks.Poststop, specs.Hook{Path: p.KlockPath, Args: []string{"klock", "oci-hook", "poststop"}})

	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[AnnotationManifest] = p.ManifestAnnotation
	spec.Annotations[AnnotationRuntime] = RuntimeFull

	proc := spec.Process
	proc.NoNewPrivileges = true
	proc.Capabilities = &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{},
	}
	if !p.AllowRoot {
		if proc.User.UID == 0 {
			proc.User.UID = NobodyID
		}
		if proc.User.GID == 0 {
			proc.User.GID = NobodyID
		}
		proc.User.AdditionalGids = slices.DeleteFunc(proc.User.AdditionalGids, func(g uint32) bool { return g == 0 })
	}

	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	spec.Linux.Seccomp = MergeSeccomp(spec.Linux.Seccomp, stage2.DeniedSyscalls())

	// klock's mount points are klock's alone: any mount the spec already
	// has there or below (a bind of another "klock-stage2", a rewrite
	// before this one) goes, so nothing can stand in for them.
	if p.Workdir != "" {
		dot := path.Join(p.Workdir, ".klock")
		dropMountsAt(spec, dot)
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: dot, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=0555", "size=4k"},
		})
	}
	if p.Landlock {
		dropMountsAt(spec, StageDir)
		bind := specs.Mount{Destination: StageDir, Type: "bind", Source: p.StateDir,
			Options: []string{"bind", "ro", "nosuid", "nodev"}}
		at := len(spec.Mounts)
		for i, m := range spec.Mounts {
			if path.Clean("/"+m.Destination) == "/dev" {
				at = i + 1
			}
		}
		spec.Mounts = slices.Insert(spec.Mounts, at, bind)
		canaryMount(spec)
		prefix := []string{Stage2Path, stage2.WallFlag + WallPath, stage2.CanaryFlag + CanaryReportPath, "--"}
		// Idempotent: a spec rewritten before (the same bundle created
		// twice) keeps one prefix; the stage 2 that runs is ours either way.
		if !slices.Equal(proc.Args[:min(len(prefix), len(proc.Args))], prefix) {
			proc.Args = append(prefix, proc.Args...)
		}
	}
	return nil
}

// canaryMount mounts the canaries' tmpfs last, over anything at
// stage2.CanaryDir (and drops what the spec had there or below): stage 2,
// the container's user with no capability, cannot mount it, and makes the
// canaries' files in it.
func canaryMount(spec *specs.Spec) {
	dropMountsAt(spec, stage2.CanaryDir)
	u := spec.Process.User
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: stage2.CanaryDir, Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "size=4k", "nr_inodes=4", "mode=0755", fmt.Sprintf("uid=%d", u.UID), fmt.Sprintf("gid=%d", u.GID)}})
}

// appendHook appends h unless the same hook is already there (a bundle
// rewritten twice runs klock's hooks once).
func appendHook(hooks []specs.Hook, h specs.Hook) []specs.Hook {
	for _, o := range hooks {
		if o.Path == h.Path && slices.Equal(o.Args, h.Args) && len(o.Env) == 0 && o.Timeout == nil {
			return hooks
		}
	}
	return append(hooks, h)
}

// dropMountsAt removes the mounts at dir or below it.
func dropMountsAt(spec *specs.Spec, dir string) {
	spec.Mounts = slices.DeleteFunc(spec.Mounts, func(m specs.Mount) bool {
		return within(path.Clean("/"+m.Destination), dir)
	})
}

func check(spec *specs.Spec, p Plan) error {
	switch {
	case spec == nil:
		return fmt.Errorf("%w: no spec", ErrBadSpec)
	case spec.Process == nil:
		return fmt.Errorf("%w: no process: klock-runtime rewrites containers that run a process", ErrBadSpec)
	case p.Landlock && len(spec.Process.Args) == 0:
		return fmt.Errorf("%w: process.args is empty (process.commandLine is Windows-only): stage 2 has nothing to exec", ErrBadSpec)
	case !filepath.IsAbs(p.KlockPath):
		return fmt.Errorf("%w: plan: klock's path %q is not absolute", ErrBadSpec, p.KlockPath)
	case p.Landlock && !filepath.IsAbs(p.StateDir):
		return fmt.Errorf("%w: plan: state directory %q is not absolute", ErrBadSpec, p.StateDir)
	case p.Workdir != "" && !path.IsAbs(p.Workdir):
		return fmt.Errorf("%w: plan: workdir %q is not absolute", ErrBadSpec, p.Workdir)
	case p.ManifestAnnotation == "":
		return fmt.Errorf("%w: plan: no manifest annotation", ErrBadSpec)
	}
	return nil
}
