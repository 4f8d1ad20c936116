//go:build linux

package lsm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/detect"
	"github.com/klocklabs/klock/internal/testutil"
)

// openCloseLoop opens and closes path n times and returns the ns per pair.
func openCloseLoop(path string, n int) (int64, error) {
	start := time.Now()
	for range n {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		unix.Close(fd)
	}
	return time.Since(start).Nanoseconds() / int64(n), nil
}

// hookLoopN is the open/close loop's length per measurement.
const hookLoopN = 50000

// BenchmarkHookCost splits what bpf-lsm adds to an open+close into its
// parts, in one run: the loop with no program attached (bare), the loop in a cgroup that is no session's
// while the programs are attached (what every other process on the
// machine pays: the hooks' trampolines and one map lookup), and the loop
// as a session's agent with the file declared (a repeated open answered
// from the session's cache). A last agent run with the kernel's run-time
// statistics on say how much of each is the programs' own work (the rest
// is the hooks' entry into BPF) and which programs ran per open+close. Figures are ns per open+close.
//
//	KLOCK_VM_BENCH=BenchmarkHookCost vmtests/vmtest.sh ./enforcer/lsm   (in the VM)
func BenchmarkHookCost(b *testing.B) {
	testutil.RequirePrivileged(b)
	if probe := detect.BPFLSM(); !probe.OK {
		if os.Getenv("KLOCK_TEST_BACKEND") == "bpf-lsm" {
			b.Fatalf("bpf-lsm forced but unavailable: %s", probe.Why)
		}
		b.Skipf("bpf-lsm unavailable here (%s): run it in the VM", probe.Why)
	}
	dir := b.TempDir()
	// The loop runs as nobody: the file and its directories are readable.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	other, err := cgroup.Create(fmt.Sprintf("lsm-bench-%d", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	defer other.Delete()
	otherFD, err := other.OpenFD()
	if err != nil {
		b.Fatal(err)
	}
	defer otherFD.Close()
	step := "openclose:" + file + ">" + strconv.Itoa(hookLoopN)
	inOther := func() float64 {
		out := &bytes.Buffer{}
		cmd := exec.Command(self, step)
		cmd.Env = append(os.Environ(), childEnv+"=agent")
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(otherFD.Fd()),
			Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if err := cmd.Run(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		return loopNS(b, out.String(), step)
	}
	l := requireLSM(b)
	_, _, agent := agentSession(b, l, "CONSUMES FILE:"+file)
	inAgent := func() float64 {
		cmd, out := agent(step)
		if err := cmd.Run(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		return loopNS(b, out.String(), step)
	}
	inAgent() // the first open fills the session's cache
	// Each round detaches the programs for the bare loop and attaches
	// them again, so all three see the same machine state.
	var bare, outside, watched float64
	for b.Loop() {
		l.closeLinks()
		bare += inOther()
		if err := l.attach(); err != nil {
			b.Fatal(err)
		}
		outside += inOther()
		watched += inAgent()
	}
	n := float64(b.N)
	// One more run of each with run-time statistics on (they cost every
	// program run two clock reads, so these runs' wall times are not used).
	otherRT, _ := statsOf(b, l.programs(), func() { inOther() })
	agentRT, agentRuns := statsOf(b, l.programs(), func() { inAgent() })
	b.ReportMetric(bare/n, "ns/open-bare")
	b.ReportMetric(outside/n, "ns/open-other-cgroup")
	b.ReportMetric(watched/n, "ns/open-agent")
	b.ReportMetric(outside/bare, "ratio-other")
	b.ReportMetric(watched/bare, "ratio-agent")
	b.ReportMetric(perOpen(otherRT), "prog-ns/open-other")
	b.ReportMetric(perOpen(agentRT), "prog-ns/open-agent")
	var ran []string
	for name, rt := range agentRT {
		ran = append(ran, fmt.Sprintf("%s %.2f runs, %d ns", name, float64(agentRuns[name])/hookLoopN, rt.Nanoseconds()/hookLoopN))
	}
	b.Logf("programs per open+close as the agent: %s", strings.Join(ran, "; "))
}

func perOpen(rt map[string]time.Duration) float64 {
	var total time.Duration
	for _, d := range rt {
		total += d
	}
	return float64(total.Nanoseconds()) / hookLoopN
}

func loopNS(b *testing.B, out, step string) float64 {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, step+"="); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("loop: %s", line)
			}
			return f
		}
	}
	b.Fatalf("no timing in %q", out)
	return 0
}

// programs are the loaded programs by name.
func (l *LSM) programs() map[string]*ebpf.Program {
	m := map[string]*ebpf.Program{}
	v := reflect.ValueOf(l.objs.lsmPrograms)
	for i := range v.NumField() {
		m[v.Type().Field(i).Tag.Get("ebpf")] = v.Field(i).Interface().(*ebpf.Program)
	}
	return m
}

// statsOf runs f with BPF run-time statistics on and returns each
// program's run time and run count during f.
func statsOf(b *testing.B, progs map[string]*ebpf.Program, f func()) (map[string]time.Duration, map[string]uint64) {
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("no BPF run-time statistics: %v", err)
		return nil, nil
	}
	defer st.Close()
	type fig struct {
		rt  time.Duration
		cnt uint64
	}
	read := func() map[string]fig {
		m := map[string]fig{}
		for name, p := range progs {
			s, err := p.Stats()
			if err != nil {
				b.Fatalf("stats of %s: %v", name, err)
			}
			m[name] = fig{s.Runtime, s.RunCount}
		}
		return m
	}
	before := read()
	f()
	after := read()
	rt, cnt := map[string]time.Duration{}, map[string]uint64{}
	for name, a := range after {
		if c := a.cnt - before[name].cnt; c > 0 {
			rt[name], cnt[name] = a.rt-before[name].rt, c
		}
	}
	return rt, cnt
}
