//go:build linux

package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

const agentUID = 65534

// backendOnce logs which backends the measured sessions used, once.
var backendOnce sync.Once

func TestMain(m *testing.M) {
	launch.Init()
	if os.Getenv("KLOCK_PERF_HELPER") == "openclose" {
		os.Exit(openClose())
	}
	if os.Getenv("KLOCK_PERF_HELPER") == "send" {
		os.Exit(sendHelper())
	}
	os.Exit(m.Run())
}

// openClose is the open/close loop, run as the agent: it prints the
// nanoseconds per iteration it measured itself.
func openClose() int {
	n, _ := strconv.Atoi(os.Getenv("KLOCK_PERF_N"))
	path := os.Getenv("KLOCK_PERF_PATH")
	start := time.Now()
	for range n {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		unix.Close(fd)
	}
	fmt.Println(time.Since(start).Nanoseconds() / int64(n))
	return 0
}

// workdir makes an agent-owned directory on the real disk.
func workdir(b *testing.B) string { return workdirIn(b, "/var/tmp") }

// workdirIn makes an agent-owned directory under parent.
func workdirIn(b *testing.B, parent string) string {
	testutil.RequirePrivileged(b)
	d, err := os.MkdirTemp(parent, "klock-perf-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Chown(d, agentUID, agentUID); err != nil {
		b.Fatal(err)
	}
	return d
}

func manifestFor(b *testing.B, wd string, procs ...string) *policy.Manifest {
	m, err := policy.Parse("perf.yaml", []byte(manifestYAML(wd, procs...)))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// manifestYAML is a strict manifest granting the workdir and executing procs.
func manifestYAML(wd string, procs ...string) string {
	var in strings.Builder
	for _, s := range []string{"CONSUMES FILE:${workdir}/**", "MUTATES FILE:${workdir}/**", "PROVIDES FILE:${workdir}/**", "DELETES FILE:${workdir}/**"} {
		in.WriteString("  - " + s + "\n")
	}
	for _, p := range procs {
		in.WriteString("  - PROVIDES PROC:" + p + "\n")
	}
	return fmt.Sprintf(`apiVersion: klock/v1
agent: {id: perf-agent}
mode: strict
workdir: %s
intents:
%scost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`, wd, in.String())
}

// underKlock runs argv as a strict session and returns its stdout.
func underKlock(b *testing.B, m *policy.Manifest, argv []string, env []string) (string, time.Duration) {
	var out, errb bytes.Buffer
	launcher, err := stage2()
	switch {
	case errors.Is(err, exec.ErrNotFound):
		// In the VM there is no go toolchain: stage 2 is this binary.
	case err != nil:
		b.Fatal(err)
	}
	start := time.Now()
	res, err := session.Run(context.Background(), session.Options{
		Manifest: m, Command: argv, Env: env, User: &launch.Credential{UID: agentUID, GID: agentUID},
		Stdout: &out, Stderr: &errb, AllowDegraded: true, LogDir: b.TempDir(), Logger: quiet(),
		Backend: session.Backend(os.Getenv("KLOCK_TEST_BACKEND")), Stage2: launcher,
	})
	took := time.Since(start)
	if err != nil {
		b.Fatalf("session: %v\n%s", err, errb.String())
	}
	if res.Killed || res.Exit.ExitCode() != 0 {
		b.Fatalf("session ended %v killed=%v reason=%q violation=%v\nstderr: %s", res.Exit, res.Killed, res.Reason, res.Violation, errb.String())
	}
	backendOnce.Do(func() {
		var names []string
		for _, be := range res.Log.Backends {
			names = append(names, be.Name)
		}
		b.Logf("backends: %s", strings.Join(names, ", "))
	})
	return out.String(), took
}

// underWalls runs argv as the agent in cgroup g behind the session's walls
// (launch: namespaces, Landlock, seccomp, no capabilities) with no BPF
// program watching, and returns its stdout. With KLOCK_TEST_BACKEND=bpf-lsm
// there is no Landlock, as in a bpf-lsm session.
func underWalls(b *testing.B, g *cgroup.Group, m *policy.Manifest, argv []string, env []string) string {
	rs, err := policy.Compile(m)
	if err != nil {
		b.Fatal(err)
	}
	var out, errb bytes.Buffer
	p, err := launch.Start(context.Background(), launch.Spec{Ruleset: rs, Group: g, Args: argv, Env: env,
		User: &launch.Credential{UID: agentUID, GID: agentUID}, NewNetNS: true, Stdout: &out, Stderr: &errb,
		NoLandlock: os.Getenv("KLOCK_TEST_BACKEND") == "bpf-lsm"})
	if err != nil {
		b.Fatalf("launch: %v", err)
	}
	if e, _ := p.Wait(); e.ExitCode() != 0 {
		b.Fatalf("walls only: %v\n%s", e, errb.String())
	}
	return out.String()
}

// direct runs argv as the agent uid without klock.
func direct(b *testing.B, dir string, argv []string, env []string, wrap ...string) (string, time.Duration) {
	return directIn(b, nil, dir, argv, env, wrap...)
}

// directIn is direct inside cgroup g (nil: the caller's).
func directIn(b *testing.B, g *cgroup.Group, dir string, argv []string, env []string, wrap ...string) (string, time.Duration) {
	argv = append(append([]string{}, wrap...), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	if len(wrap) == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agentUID, Gid: agentUID}}
	}
	if g != nil {
		fd, err := g.OpenFD()
		if err != nil {
			b.Fatal(err)
		}
		defer fd.Close()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%v: %v\n%s", argv, err, errb.String())
	}
	return out.String(), time.Since(start)
}

func ns(b *testing.B, s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		b.Fatalf("no timing in output %q", s)
	}
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	if err != nil {
		b.Fatalf("timing %q: %v", s, err)
	}
	return v
}

// BenchmarkOpenCloseRatio: ns per open+close inside the agent, under klock
// (Landlock + tracepoints) over the same loop without klock. The loop is
// also run without klock in a fresh cgroup of klock's parent, to separate
// what placing a process in a cgroup costs (memory accounting of every
// struct file, where the memory controller is on) from klock's own hooks.
// openCloseN is the open/close loop's length.
const openCloseN = 200000

func BenchmarkOpenCloseRatio(b *testing.B) {
	wd := workdir(b)
	file := filepath.Join(wd, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	// The agent cannot reach go test's private build directory: copy the
	// helper (this binary) where it can.
	self, err := testutil.CopySelf(wd, "helper")
	if err != nil {
		b.Fatal(err)
	}
	m := manifestFor(b, wd, self)
	env := []string{"KLOCK_PERF_HELPER=openclose", "KLOCK_PERF_N=" + strconv.Itoa(openCloseN), "KLOCK_PERF_PATH=" + file}
	g, err := cgroup.Create(fmt.Sprintf("perf-baseline-%d", os.Getpid()))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Delete()
	var base, incg, walls, floor, klock float64
	for b.Loop() {
		out, _ := direct(b, wd, []string{self}, env)
		base += ns(b, out)
		out, _ = directIn(b, g, wd, []string{self}, env)
		incg += ns(b, out)
		out = underWalls(b, g, m, []string{self}, env)
		walls += ns(b, out)
		underFloor(b, func() { out = underWalls(b, g, m, []string{self}, env) })
		floor += ns(b, out)
		out, _ = underKlock(b, m, []string{self}, env)
		klock += ns(b, out)
	}
	b.ReportMetric(base/float64(b.N), "ns/open-direct")
	b.ReportMetric(incg/float64(b.N), "ns/open-cgroup")
	// The session's walls alone, no BPF program: what of the ratio is the
	// wall, what the watching (bpf-lsm: the walls besides its programs).
	b.ReportMetric(walls/float64(b.N), "ns/open-walls")
	b.ReportMetric(klock/float64(b.N), "ns/open-klock")
	// The walls with a do-nothing program on each of the backend's hooks
	// (floor_test.go): what any program there pays before its first
	// instruction.
	b.ReportMetric(floor/float64(b.N), "ns/open-floor")
	b.ReportMetric(floor/base, "ratio-floor")
	// One more run with BPF statistics on: klock's programs' own time per
	// open+close (the rest of the watching's cost is the hooks' entry and
	// the kernel's tracepoint path).
	if rt, _ := bpfTime(b, func() { underKlock(b, m, []string{self}, env) }); rt > 0 {
		b.ReportMetric(float64(rt.Nanoseconds())/float64(openCloseN), "bpf-ns/open")
	}
	b.ReportMetric(klock/base, "ratio")
	b.ReportMetric(klock/incg, "ratio-vs-cgroup")
}

const workload = `set -e
t0=$(date +%s%N)
mkdir -p tree && tar -xf ../tree.tar -C tree
find tree -type f | wc -l >/dev/null
grep -r -c needle tree >/dev/null || true
rm -rf tree
t1=$(date +%s%N)
echo $((t1 - t0))`

// BenchmarkFileWorkloadRatio: untar, find, grep -r over a 10k-file tree;
// under klock and under strace -f, each over the same without either. The
// tree lives on tmpfs: klock's cost is per syscall, and on this VM's disk
// the writeback of 10k new files varied the direct run from 0.5 s to 11 s.
// Each variant's best round is compared (noise only ever adds time).
func BenchmarkFileWorkloadRatio(b *testing.B) {
	parent := workdirIn(b, "/dev/shm")
	src := filepath.Join(parent, "src")
	for i := range 10000 {
		d := filepath.Join(src, fmt.Sprintf("d%03d", i/100))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.txt", i)), bytes.Repeat([]byte("some text with a needle in it\n"), 8), 0o644)
	}
	if out, err := exec.Command("tar", "-cf", filepath.Join(parent, "tree.tar"), "-C", src, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar: %v %s", err, out)
	}
	os.RemoveAll(src)
	wd := filepath.Join(parent, "work")
	os.Mkdir(wd, 0o755)
	os.Chown(wd, agentUID, agentUID)
	procs := []string{"/usr/bin/dash", "/usr/bin/date", "/usr/bin/mkdir", "/usr/bin/tar", "/usr/bin/find", "/usr/bin/wc", "/usr/bin/grep", "/usr/bin/rm"}
	m := manifestFor(b, wd, procs...)
	m.Intents = append(m.Intents, mustIntent(b, "CONSUMES FILE:"+filepath.Join(parent, "tree.tar")))
	argv := []string{"/bin/sh", "-c", workload}
	env := []string{"PATH=/usr/bin:/bin"}
	_, haveStrace := exec.LookPath("strace")
	best := func(cur, v float64) float64 {
		if cur == 0 || v < cur {
			return v
		}
		return cur
	}
	g, err := cgroup.Create(fmt.Sprintf("perf-walls-%d", os.Getpid()))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Delete()
	var base, walls, floor, klock, strace float64
	for b.Loop() {
		out, _ := direct(b, wd, argv, env)
		base = best(base, ns(b, out))
		out = underWalls(b, g, m, argv, env)
		walls = best(walls, ns(b, out))
		underFloor(b, func() { out = underWalls(b, g, m, argv, env) })
		floor = best(floor, ns(b, out))
		out, _ = underKlock(b, m, argv, env)
		klock = best(klock, ns(b, out))
		if haveStrace == nil {
			out, _ = direct(b, wd, argv, env, "strace", "-f", "-qq", "-o", "/dev/null", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
			strace = best(strace, ns(b, out))
		}
	}
	b.ReportMetric(base/1e6, "ms-direct-best")
	b.ReportMetric(klock/1e6, "ms-klock-best")
	// One more run with BPF statistics on: klock's programs' own time in
	// the workload.
	if rt, _ := bpfTime(b, func() { underKlock(b, m, argv, env) }); rt > 0 {
		b.ReportMetric(float64(rt.Microseconds())/1000, "bpf-ms")
	}
	b.ReportMetric(klock/base, "ratio-klock")
	// The session's walls alone, and with a do-nothing program on each of
	// the backend's hooks (floor_test.go).
	b.ReportMetric(walls/base, "ratio-walls")
	b.ReportMetric(floor/base, "ratio-floor")
	if haveStrace == nil {
		b.ReportMetric(strace/base, "ratio-strace")
	}
}

// BenchmarkRunTrueLatency: wall time of `klock run --no-daemon -- /usr/bin/true`,
// the real command in a process of its own (binary start, kernel BTF,
// BPF load and attach, cgroup, namespaces, Landlock, backup, log), and of
// the same command with klockd running, each minus /bin/true run directly. The same session run in this process
// (session.Run, whose BTF and runtime are warm after the first) is
// reported beside it, so a start-up cost that only a new process pays
// shows as the difference.
func BenchmarkRunTrueLatency(b *testing.B) {
	wd := workdir(b)
	src := manifestYAML(wd, "/usr/bin/true")
	m, err := policy.Parse("perf.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	mpath := filepath.Join(b.TempDir(), "perf.yaml")
	if err := os.WriteFile(mpath, []byte(src), 0o644); err != nil {
		b.Fatal(err)
	}
	cli := buildCLI(b)
	sock := startKlockd(b, filepath.Join(filepath.Dir(cli), "klockd"))
	run := func(daemon bool) time.Duration {
		args := []string{"run", "-q", "-m", mpath, "--user", strconv.Itoa(agentUID), "--log-dir", b.TempDir()}
		if !daemon {
			args = append(args, "--no-daemon")
		}
		if be := os.Getenv("KLOCK_TEST_BACKEND"); be != "" {
			args = append(args, "--backend", be)
		}
		cmd := exec.Command(cli, append(args, "--", "/usr/bin/true")...)
		cmd.Env = append(os.Environ(), "KLOCK_SOCKET="+sock)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		t := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%v: %v\n%s", cmd.Args, err, errb.String())
		}
		return time.Since(t)
	}
	run(false) // page cache
	run(true)
	stage2Bin := filepath.Join(filepath.Dir(cli), "klock-stage2")
	var base, klock, viaDaemon, inproc, cliAlone, stage2Alone, kernelBTF time.Duration
	for b.Loop() {
		_, d := direct(b, wd, []string{"/bin/true"}, nil)
		base += d
		klock += run(false)
		viaDaemon += run(true)
		_, k := underKlock(b, m, []string{"/usr/bin/true"}, nil)
		inproc += k
		t := time.Now()
		if out, err := exec.Command(cli, "version").CombinedOutput(); err != nil {
			b.Fatalf("klock version: %v %s", err, out)
		}
		cliAlone += time.Since(t)
		// The floors under the two paths. Stage 2 is a Go binary every
		// session starts (the smallest one klock has): run by hand it
		// only starts, says it is not meant to be, and exits.
		t = time.Now()
		if err := exec.Command(stage2Bin).Run(); err == nil {
			b.Fatal("klock-stage2 run by hand exited 0")
		}
		stage2Alone += time.Since(t)
		// Every embedded session decodes the kernel's BTF before it can
		// load a program (CO-RE, attach points): cilium/ebpf's decode and
		// name index, in a fresh cache as a new klock process has.
		kernelBTF += decodeKernelBTF(b)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / 1000 }
	b.ReportMetric(ms(base), "ms-direct")
	b.ReportMetric(ms(klock-base), "ms-added")
	// The same command with klockd running: the real CLI, its socket
	// round trip and the daemon's session.
	b.ReportMetric(ms(viaDaemon-base), "ms-added-klockd")
	b.ReportMetric(ms(inproc-base), "ms-added-in-process")
	// What the klock binary alone costs to start and exit (klock version),
	// part of both paths.
	b.ReportMetric(ms(cliAlone), "ms-cli-start")
	// What any session pays to start its stage 2 (a Go runtime's start),
	// and what the embedded path pays before its first BPF load.
	b.ReportMetric(ms(stage2Alone), "ms-stage2-start")
	b.ReportMetric(ms(kernelBTF), "ms-kernel-btf")
	// The goal for a run through klockd, from the same run: twice the
	// start of a small Go program (stage 2 is the smallest klock has)
	// plus 5 ms; klockd-over-goal is how far off it is (<= 1 meets it).
	goal := 2*ms(stage2Alone) + 5
	b.ReportMetric(goal, "ms-goal-klockd")
	b.ReportMetric(ms(viaDaemon-base)/goal, "klockd-over-goal")
}

// decodeKernelBTF returns how long a fresh cache takes to decode the
// kernel's BTF and find one type by name, as the first program load of a
// new klock process does.
func decodeKernelBTF(b *testing.B) time.Duration {
	t := time.Now()
	k, err := btf.NewCache().Kernel()
	if err != nil {
		b.Fatalf("kernel BTF: %v", err)
	}
	var fn *btf.Func
	if err := k.TypeByName("security_file_open", &fn); err != nil {
		b.Fatalf("kernel BTF: %v", err)
	}
	return time.Since(t)
}

// buildCLI builds cmd/klock and, beside it, cmd/klock-stage2 (the session
// launcher klock run uses when installed next to it, as make build does)
// and cmd/klockd.
func buildCLI(b *testing.B) string {
	dir := b.TempDir()
	testutil.BuildCommand(b, dir, "klock-stage2")
	testutil.BuildCommand(b, dir, "klockd")
	return testutil.BuildCommand(b, dir, "klock")
}

// startKlockd runs klockd on a socket of its own until the benchmark ends
// and returns the socket's path once it accepts connections.
func startKlockd(b *testing.B, klockd string) string {
	sock := filepath.Join(b.TempDir(), "klockd.sock")
	cmd := exec.Command(klockd, "-socket", sock)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	deadline := time.After(30 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		select {
		case <-exited:
			b.Fatalf("klockd exited: %s", errb.String())
		case <-deadline:
			b.Fatalf("klockd did not listen within 30 s: %s", errb.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stage2 is a cmd/klock-stage2 for the sessions this process runs, built
// once: what an installed klock uses.
var stage2 = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "klock-perf-stage2-")
	if err != nil {
		return "", err
	}
	return testutil.Build(dir, "klock-stage2")
})

func mustIntent(b *testing.B, s string) policy.Intent {
	in, err := policy.ParseIntent(s)
	if err != nil {
		b.Fatal(err)
	}
	return in
}
