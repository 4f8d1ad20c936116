//go:build linux

package detect

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/netguard"
	"github.com/klocklabs/klock/enforcer/observe"
	"golang.org/x/sys/unix"
)

// Guarantee levels.
const (
	Blocks  = "blocks before the effect"
	Detects = "detects, kills and rolls back"
	Support = "session isolation"
)

// Check is one probed mechanism.
type Check struct {
	Name      string `json:"name"`
	OK        bool   `json:"ok"`
	Guarantee string `json:"guarantee"`
	Detail    string `json:"detail,omitempty"` // what was found (e.g. "ABI 7")
	Why       string `json:"why,omitempty"`    // why it is unavailable
	Fix       string `json:"fix,omitempty"`    // how to enable it
	Used      bool   `json:"used_by_klock_run"`
}

// Report is the result of All.
type Report struct {
	Kernel string  `json:"kernel"`
	Root   bool    `json:"root"`
	Checks []Check `json:"checks"`
	// Strict says whether strict mode can start here, and if not, why.
	Strict    bool   `json:"strict_ready"`
	StrictWhy string `json:"strict_why,omitempty"`
	// FileWall is the file backend klock run --backend auto picks here:
	// "bpf-lsm" when its probe passes, else "landlock".
	FileWall string `json:"file_wall"`
}

// All runs every probe.
func All() Report {
	var u unix.Utsname
	_ = unix.Uname(&u)
	r := Report{Kernel: unix.ByteSliceToString(u.Release[:]), Root: os.Geteuid() == 0}
	r.Checks = []Check{Cgroup(), Landlock(), Tracepoints(), CgroupNet(), NetWall(), BPFLSM(), IOURing(), Launcher()}
	// One file wall is used: bpf-lsm where it works, else Landlock.
	r.FileWall = "landlock"
	for i := range r.Checks {
		if r.Checks[i].Name == "bpf-lsm" && r.Checks[i].OK {
			r.FileWall = "bpf-lsm"
		}
	}
	r.Checks = append(r.Checks, UnixSockets(r.FileWall == "bpf-lsm"))
	for i := range r.Checks {
		switch r.Checks[i].Name {
		case "bpf-lsm":
			r.Checks[i].Used = r.FileWall == "bpf-lsm"
		case "landlock":
			r.Checks[i].Used = r.FileWall == "landlock"
		}
	}
	r.Checks = append(r.Checks, fileClasses(r.FileWall)...)
	r.Checks = append(r.Checks, Containers(r.FileWall)...)
	var missing []string
	for _, c := range r.Checks {
		if c.Used && !c.OK {
			missing = append(missing, c.Name)
		}
	}
	r.Strict = len(missing) == 0
	if !r.Strict {
		r.StrictWhy = "unavailable: " + strings.Join(missing, ", ")
	}
	return r
}

func needRoot(c *Check) bool {
	if os.Geteuid() != 0 {
		c.Why, c.Fix = "probing needs root", "run klock doctor as root (sudo)"
		return false
	}
	return true
}

// Cgroup checks cgroup v2 and cgroup.kill by creating a scratch group.
func Cgroup() Check {
	c := Check{Name: "cgroup-v2", Guarantee: Support, Used: true}
	mp, err := cgroup.Mountpoint()
	if err != nil {
		c.Why, c.Fix = err.Error(), "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup)"
		return c
	}
	c.Detail = "mounted at " + mp
	if !needRoot(&c) {
		return c
	}
	g, err := cgroup.Create(fmt.Sprintf("doctor-%d", os.Getpid()))
	if err != nil {
		c.Why, c.Fix = err.Error(), "make the cgroup2 hierarchy writable by root"
		return c
	}
	defer g.Delete()
	if _, err := os.Stat(g.Path + "/cgroup.kill"); err != nil {
		c.Why, c.Fix = "no cgroup.kill in session groups", "use a kernel >= 5.14"
		return c
	}
	c.OK = true
	c.Detail += "; session groups with cgroup.kill"
	return c
}

// Landlock reports the kernel's Landlock ABI.
func Landlock() Check {
	c := Check{Name: "landlock", Guarantee: Blocks, Used: true}
	abi, err := launch.ProbeABI()
	if err != nil {
		c.Why = err.Error()
		c.Fix = "boot a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in lsm= (e.g. lsm=landlock,lockdown,yama,bpf)"
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("ABI %d: %s", abi, landlockRights(abi))
	return c
}

// landlockRights says what a Landlock ABI can wall (each ABI adds to the
// previous one).
func landlockRights(abi int) string {
	parts := []string{"files (read/write/exec/make/remove)"}
	for _, a := range []struct {
		abi  int
		what string
	}{{2, "refer (links, renames)"}, {3, "truncate"}, {4, "TCP bind/connect ports"}, {5, "device ioctls"}, {6, "abstract unix sockets and signals scoped"}} {
		if abi >= a.abi {
			parts = append(parts, a.what)
		}
	}
	return strings.Join(parts, ", ")
}

// Tracepoints loads and attaches the observation programs.
func Tracepoints() Check {
	c := Check{Name: "tracepoints", Guarantee: Detects, Used: true}
	if !needRoot(&c) {
		return c
	}
	o, err := observe.Load()
	if err != nil {
		c.Why = err.Error()
		c.Fix = "a kernel with BTF (/sys/kernel/btf/vmlinux), raw tracepoints and BPF ring buffers (>= 5.8)"
		return c
	}
	o.Close()
	c.OK, c.Detail = true, "raw syscall tracepoints, ring buffer, cgroup-id filter"
	return c
}

// CgroupNet trial-loads and attaches the network programs.
func CgroupNet() Check {
	c := Check{Name: "cgroup-net", Guarantee: Blocks, Used: true}
	if !needRoot(&c) {
		return c
	}
	if err := netguard.Probe(); err != nil {
		c.Why = err.Error()
		c.Fix = "a kernel with CONFIG_CGROUP_BPF and cgroup v2"
		return c
	}
	c.OK, c.Detail = true, "connect4/6, sendmsg4/6, bind4/6, sock_create per session cgroup"
	return c
}

// IOURing reports whether io_uring is enabled system-wide (klock denies it
// to agents with seccomp unless declared).
func IOURing() Check {
	c := Check{Name: "io_uring", Guarantee: Support, OK: true}
	data, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Detail = "no io_uring_disabled sysctl; agents are denied io_uring by seccomp"
	case err == nil && strings.TrimSpace(string(data)) == "0":
		c.Detail = "enabled system-wide; agents are denied io_uring by seccomp (its operations bypass syscall tracepoints)"
	default:
		c.Detail = "restricted system-wide (io_uring_disabled=" + strings.TrimSpace(string(data)) + ")"
	}
	return c
}

// Launcher reports which binary sets each session up (stage 2): the small
// klock-stage2 installed beside klock, or klock itself re-executed. Either
// sets up the same session; the small one starts a few milliseconds
// sooner, so this check never fails.
func Launcher() Check {
	c := Check{Name: "launcher", Guarantee: Support, OK: true, Used: true}
	path, err := launch.LauncherFor("")
	if err != nil {
		c.Detail = "klock itself is re-executed for each session (a few ms slower to start): " + err.Error()
		c.Fix = "install klock-stage2 (make build puts it in bin/) beside klock and klockd, owned by root, mode 0755"
		return c
	}
	c.Detail = path
	return c
}
