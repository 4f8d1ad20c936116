package oci

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
)

type call struct {
	name string
	args [6]uint64
}

func argHolds(c specs.LinuxSeccompArg, args [6]uint64) bool {
	if c.Index >= 6 {
		return false
	}
	a := args[c.Index]
	switch c.Op {
	case specs.OpEqualTo:
		return a == c.Value
	case specs.OpNotEqual:
		return a != c.Value
	case specs.OpLessThan:
		return a < c.Value
	case specs.OpLessEqual:
		return a <= c.Value
	case specs.OpGreaterThan:
		return a > c.Value
	case specs.OpGreaterEqual:
		return a >= c.Value
	case specs.OpMaskedEqual:
		return a&c.Value == c.ValueTwo
	}
	return false
}

// mayAllow models a profile conservatively: a call may run when any rule
// that matches it allows, or when none matches and the default allows.
// (libseccomp's precedence between matching rules of different actions is
// not modelled: either may win, so either counts.)
func mayAllow(p *specs.LinuxSeccomp, c call) bool {
	matched := false
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, c.name) {
			continue
		}
		ok := true
		for _, a := range r.Args {
			ok = ok && argHolds(a, c.args)
		}
		if !ok {
			continue
		}
		matched = true
		if !denies(r.Action) {
			return true
		}
	}
	return !matched && !denies(p.DefaultAction)
}

var (
	actions = []specs.LinuxSeccompAction{specs.ActAllow, specs.ActLog, specs.ActErrno, specs.ActKillProcess,
		specs.ActKill, specs.ActKillThread, specs.ActTrap, specs.ActTrace, specs.ActNotify}
	ops    = []specs.LinuxSeccompOperator{specs.OpEqualTo, specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpGreaterThan, specs.OpGreaterEqual, specs.OpMaskedEqual}
	values = []uint64{0, 1, 2, 3, unix.CLONE_NEWUSER, unix.CLONE_NEWNS | unix.CLONE_NEWPID, unix.TIOCSTI, 1<<32 | unix.TIOCSTI, ^uint64(0)}
)

func namePool() []string {
	return append(stage2.DeniedSyscalls(), "read", "write", "openat", "clone", "clone3", "unshare", "ioctl", "socket")
}

func randomProfile(r *rand.Rand) *specs.LinuxSeccomp {
	if r.IntN(8) == 0 {
		return nil
	}
	pool := namePool()
	p := &specs.LinuxSeccomp{DefaultAction: actions[r.IntN(len(actions))]}
	if r.IntN(2) == 0 {
		p.Architectures = []specs.Arch{specs.ArchX86_64, specs.ArchX86}
	}
	for range r.IntN(8) {
		rule := specs.LinuxSyscall{Action: actions[r.IntN(len(actions))]}
		for range 1 + r.IntN(5) {
			rule.Names = append(rule.Names, pool[r.IntN(len(pool))])
		}
		for range r.IntN(3) {
			rule.Args = append(rule.Args, specs.LinuxSeccompArg{Index: uint(r.IntN(2)), Op: ops[r.IntN(len(ops))],
				Value: values[r.IntN(len(values))], ValueTwo: values[r.IntN(len(values))]})
		}
		p.Syscalls = append(p.Syscalls, rule)
	}
	return p
}

func calls(r *rand.Rand) []call {
	var out []call
	for _, n := range namePool() {
		out = append(out, call{name: n})
		for range 12 {
			out = append(out, call{name: n, args: [6]uint64{values[r.IntN(len(values))], values[r.IntN(len(values))]}})
		}
	}
	return out
}

// TestMergeSeccompNeverWidens: for random container profiles, every
// syscall of the deny list ends denied whatever its arguments; no call
// the profile denied becomes allowed; calls klock has no rule for are
// decided as before; the profile itself is not modified; and where the
// argument rules apply, a namespace-creating clone and TIOCSTI (even with
// high bits set) are denied.
func TestMergeSeccompNeverWidens(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 2026))
	deny := stage2.DeniedSyscalls()
	argNames := []string{"clone", "unshare", "clone3", "ioctl"}
	for i := range 3000 {
		orig := randomProfile(r)
		before, _ := json.Marshal(orig)
		merged := MergeSeccomp(orig, deny)
		if after, _ := json.Marshal(orig); string(after) != string(before) {
			t.Fatalf("profile %d modified:\n%s\n%s", i, before, after)
		}
		base := orig
		if base == nil {
			base = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
		}
		for _, c := range calls(r) {
			was, is := mayAllow(base, c), mayAllow(merged, c)
			switch {
			case slices.Contains(deny, c.name) && is:
				t.Fatalf("profile %d: %s%v may run after the merge\norig   %s\nmerged %s", i, c.name, c.args[:2], before, js(merged))
			case !was && is:
				t.Fatalf("profile %d: %s%v was denied and may run after the merge\norig   %s\nmerged %s", i, c.name, c.args[:2], before, js(merged))
			case !slices.Contains(deny, c.name) && !slices.Contains(argNames, c.name) && was != is:
				t.Fatalf("profile %d: %s%v changed (%v -> %v) though klock has no rule for it", i, c.name, c.args[:2], was, is)
			}
		}
		named := func(n string) bool {
			return slices.ContainsFunc(base.Syscalls, func(r specs.LinuxSyscall) bool { return slices.Contains(r.Names, n) })
		}
		if !denies(base.DefaultAction) {
			if !named("clone") && mayAllow(merged, call{name: "clone", args: [6]uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}}) {
				t.Fatalf("profile %d: clone(CLONE_NEWUSER) may run: %s", i, js(merged))
			}
			if !named("ioctl") && mayAllow(merged, call{name: "ioctl", args: [6]uint64{0, 1<<32 | unix.TIOCSTI}}) {
				t.Fatalf("profile %d: ioctl(TIOCSTI|1<<32) may run: %s", i, js(merged))
			}
			if !named("clone") && !mayAllow(merged, call{name: "clone", args: [6]uint64{uint64(unix.SIGCHLD)}}) {
				t.Fatalf("profile %d: a plain fork (clone(SIGCHLD)) is denied: %s", i, js(merged))
			}
		}
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestMergeSeccompShapes pins the two documented shapes.
func TestMergeSeccompShapes(t *testing.T) {
	deny := []string{"bpf", "ptrace"}
	got := MergeSeccomp(nil, deny)
	if got.DefaultAction != specs.ActAllow || !reflect.DeepEqual(got.Syscalls[0].Names, deny) || got.Syscalls[0].Action != specs.ActErrno || *got.Syscalls[0].ErrnoRet != uint(unix.EPERM) {
		t.Fatalf("no profile: %s", js(got))
	}
	// Docker-like: default ERRNO, an allow list naming ptrace: ptrace leaves
	// the allow list and falls to the default; nothing is added.
	docker := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"read", "ptrace", "write"}, Action: specs.ActAllow},
		{Names: []string{"bpf"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 1, Op: specs.OpEqualTo}}},
	}}
	got = MergeSeccomp(docker, deny)
	want := []specs.LinuxSyscall{{Names: []string{"read", "write"}, Action: specs.ActAllow}}
	if got.DefaultAction != specs.ActErrno || !reflect.DeepEqual(got.Syscalls, want) {
		t.Fatalf("default-deny profile: %s", js(got))
	}
	// Already denied unconditionally (KILL is stronger): left as is.
	kill := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"bpf"}, Action: specs.ActKillProcess}}}
	got = MergeSeccomp(kill, deny)
	if !reflect.DeepEqual(got.Syscalls[0], kill.Syscalls[0]) || !reflect.DeepEqual(got.Syscalls[1].Names, []string{"ptrace"}) {
		t.Fatalf("kill profile: %s", js(got))
	}
	// The errno pointers are not shared between rules or calls.
	a, b := MergeSeccomp(nil, deny), MergeSeccomp(nil, deny)
	*a.Syscalls[0].ErrnoRet = 99
	if *b.Syscalls[0].ErrnoRet != uint(unix.EPERM) {
		t.Fatal("errnoRet shared")
	}
}
