package stage2

import (
	"fmt"
	"syscall"
)

// Spec is what launch sends stage 2 over the spec pipe (JSON): the agent
// and everything stage 2 must set up before exec'ing it.
type Spec struct {
	// Protocol and Build must equal stage 2's own: a klock-stage2 left over
	// from another build would otherwise set sessions up with old code.
	Protocol   int      `json:"protocol"`
	Build      string   `json:"build"`
	Path       string   `json:"path"`
	Args       []string `json:"args"`
	Env        []string `json:"env"`
	Dir        string   `json:"dir"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Groups     []uint32 `json:"groups"`
	NewNetNS   bool     `json:"new_netns"`
	IOURing    bool     `json:"io_uring"`
	ExtraFiles int      `json:"extra_files"`
	Landlock   *Wall    `json:"landlock"`
	NoLandlock bool     `json:"no_landlock,omitempty"`
	Mask       []string `json:"mask,omitempty"`
	// ResolvConf is bind-mounted read-only over /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf,omitempty"`
	// Binds are directories bind-mounted over others (a private /tmp)
	// before the Landlock rules are opened, so rules on their targets
	// attach to the bound directories.
	Binds []Bind `json:"binds,omitempty"`
	// DenyMetaIoctls: the seccomp filter refuses metaioctl.List (EPERM).
	DenyMetaIoctls bool `json:"deny_meta_ioctls,omitempty"`
	// NotifyFD, when not 0, is a unix socket of stage 2's: the filter
	// then traps connect(2) (SECCOMP_RET_USER_NOTIF), and stage 2 sends
	// the filter's listener on this socket (SCM_RIGHTS) before it waits
	// for the release. A kernel without the listener gets the filter
	// without the trap, and the socket is closed with nothing sent.
	NotifyFD int `json:"notify_fd,omitempty"`
	// Canary: the operations stage 2 tries under every wall after the
	// release, before the agent's exec; nil for none.
	Canary *Canary `json:"canary,omitempty"`
}

// Canary is what proves the walls before the agent runs: a write, an exec
// and a connect that each must be refused. The walls are trusted only
// once they have refused an operation in the session's own cgroup, with
// the session's own identity, namespaces, Landlock domain and seccomp
// filter, on the kernel that runs it: a wall that silently does nothing
// (a kernel built without a hook, a program that did not attach, an
// empty ruleset) is caught before the agent's first instruction.
type Canary struct {
	// Dir is where stage 2 mounts the canaries' tmpfs (an existing,
	// empty directory no declared scope covers).
	Dir   string `json:"dir"`
	Write bool   `json:"write,omitempty"`
	Exec  bool   `json:"exec,omitempty"`
	// Connect is an IPv4 address and port no declared peer covers.
	Connect string `json:"connect,omitempty"`
	// Strict: a canary let through fails the start (step "canary").
	Strict bool `json:"strict,omitempty"`
	// FileWall and NetWall name the walls that must refuse the file and
	// exec canaries and the connect canary, for the reports.
	FileWall string `json:"file_wall,omitempty"`
	NetWall  string `json:"net_wall,omitempty"`
}

// CanaryDir is where the canaries' files live in the agent's mount
// namespace: a tmpfs stage 2 mounts there for klock run, one the
// container's spec mounts there for a container (oci.Rewrite). One fixed
// place, which the session also uses to keep the canaries' events from
// its engine.
const CanaryDir = "/run/klock-canary"

// StepCanary is the failure's step when a wall let a canary through in
// strict mode.
const StepCanary = "canary"

// The canaries' files in Canary.Dir.
const (
	CanaryWrite = "w"
	CanaryExec  = "x"
)

// The kinds of canary.
const (
	CanaryKindWrite   = "write"
	CanaryKindExec    = "exec"
	CanaryKindConnect = "connect"
)

// CanaryResult is one canary's outcome.
type CanaryResult struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// Wall is the wall that must refuse it.
	Wall    string `json:"wall,omitempty"`
	Refused bool   `json:"refused"`
	// Errno is the kernel's answer by name (EACCES), "" for success.
	Errno string `json:"errno,omitempty"`
	// Skipped says why the canary was not tried (launch sets it: the
	// declared scope lets the agent do it).
	Skipped string `json:"skipped,omitempty"`
}

func (r CanaryResult) String() string {
	if r.Skipped != "" {
		return fmt.Sprintf("the %s canary (%s) was skipped: %s", r.Kind, r.Target, r.Skipped)
	}
	if r.Refused {
		return fmt.Sprintf("%s refused the %s canary (%s: %s)", r.Wall, r.Kind, r.Target, r.Errno)
	}
	if r.Errno == "" {
		return fmt.Sprintf("%s let the %s canary (%s) through", r.Wall, r.Kind, r.Target)
	}
	return fmt.Sprintf("%s did not refuse the %s canary (%s): the kernel answered %s", r.Wall, r.Kind, r.Target, r.Errno)
}

// CanaryReport is the line stage 2 writes on the status pipe before the
// exec (and before a failure's report): the canaries' outcomes.
type CanaryReport struct {
	Canaries []CanaryResult `json:"canaries"`
}

// Wall is the Landlock ruleset stage 2 builds and enforces: the part of
// launch's LandlockPlan the kernel sees (the residuals stay with launch).
type Wall struct {
	ABI        int        `json:"abi"`
	HandledFS  FSRights   `json:"handled_fs"`
	HandledNet NetRights  `json:"handled_net"`
	Scoped     uint64     `json:"scoped"`
	Rules      []WallRule `json:"rules"`
	Ports      []PortRule `json:"ports,omitempty"`
	// MemfdNoexec: set the new pid namespace's vm.memfd_noexec to 2.
	MemfdNoexec bool `json:"memfd_noexec"`
}

// WallRule is one path-beneath rule: Rights on Path and, when Dir, on
// everything beneath it.
type WallRule struct {
	Path   string   `json:"path"`
	Rights FSRights `json:"rights"`
	Dir    bool     `json:"dir"`
}

// Bind is one bind mount: the directory Src (a host path) mounted over
// Dst in the agent's mount namespace, nosuid and nodev.
type Bind struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

// PortRule is one Landlock TCP port rule.
type PortRule struct {
	Port   uint16    `json:"port"`
	Rights NetRights `json:"rights"`
}

// Protocol is the version of Spec, the environment variable and the
// status report. Bump it with any change to them.
const Protocol = 8

// Build identifies the build (the Makefile sets it to klock's version with
// -X, for klock, klockd and klock-stage2 alike); Spec.Build must match it.
var Build = ""

// StepBuild is the failure's step when the Spec is from another protocol
// or build: launch then retries with its own binary as stage 2.
const StepBuild = "build"

// EnvVar marks a stage-2 process; its value is "SPECFD,STATUSFD,GOFD": the
// spec pipe (read), the status pipe (write) and the go pipe (read).
const EnvVar = "_KLOCK_LAUNCH_STAGE2"

// FailExit is stage 2's exit status when it fails before exec (the precise
// error travels over the status pipe).
const FailExit = 125

// MemfdNoexecSysctl is the per-pid-namespace switch Wall.MemfdNoexec sets.
const MemfdNoexecSysctl = "/proc/sys/vm/memfd_noexec"

// failure is what stage 2 writes on the status pipe when it fails before
// exec (JSON); launch decodes it as a StageError, whose tags these are.
type failure struct {
	Step  string        `json:"step"`  // "landlock", "mount", "exec", ...
	Msg   string        `json:"msg"`   // e.g. "path /srv/x: no such file or directory"
	Errno syscall.Errno `json:"errno"` // 0 when there is none
	// Path is the program a failed exec named (the resolved command).
	Path string `json:"path,omitempty"`
}

func (f *failure) Error() string { return f.Step + ": " + f.Msg }

// ContainerWall is what klock-stage2 reads inside a container, from the
// file its --klock-wall flag names (klock-runtime puts klock-stage2 first
// in the container's process.args; the session writes this file while
// the container's init waits in the OCI createRuntime hook). Stage 2 then
// enforces Landlock, if any, and execs the rest of its arguments: the
// container's entrypoint.
type ContainerWall struct {
	Protocol int `json:"protocol"`
	// Landlock is the wall; nil when bpf-lsm walls the container's files
	// from outside.
	Landlock *Wall `json:"landlock,omitempty"`
	// By says what walls the files (for the error of a wall that is
	// missing: "landlock" or "bpf-lsm").
	By string `json:"by"`
	// DenyMetaIoctls: the seccomp filter stage 2 stacks on the container's
	// own (klock run's, which can only narrow it) also refuses the
	// metadata ioctls (Spec.DenyMetaIoctls).
	DenyMetaIoctls bool `json:"deny_meta_ioctls,omitempty"`
	// Canary is what stage 2 proves before the entrypoint's exec, as for
	// klock run (Spec.Canary: its files in a tmpfs the container's spec
	// mounts at Canary.Dir); nil for none. Only the stage 2 with
	// CanaryFlag tries them: the entrypoint's, not a process exec'd into
	// the container later.
	Canary *Canary `json:"canary,omitempty"`
	// Gated: the createRuntime hook returned before the session finished
	// the container's preparation (its network programs, the backup, the
	// log), and every stage 2 here waits for its release (ReleaseFileName
	// beside the wall file) after its own walls and before the canaries
	// and the exec.
	Gated bool `json:"gated,omitempty"`
}

// WallFlag is stage 2's flag in a container's process.args.
const WallFlag = "--klock-wall="

// CanaryFlag, after WallFlag in the entrypoint's process.args (never in
// an exec'd process's), names the pipe stage 2 reports the canaries on
// (CanaryReport's line, then a failure's JSON line, if any). The session
// reads it from the host; stage 2 opens it before the walls go up and
// refuses to start the entrypoint when nobody reads it (ENXIO): the
// canaries are never tried unreported.
const CanaryFlag = "--klock-canary="
