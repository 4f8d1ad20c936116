//go:build linux

package ctrtest

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func sh(script string) []string { return []string{"sh", "-c", script} }

func TestRuncRun(t *testing.T) {
	runc := Runc(t)
	b := NewBundle(t, BundleOptions{Args: sh("echo hi; echo err >&2; id -u")})
	r := RunC(t, runc, b, "echo")
	if r.Exit != 0 || r.Stdout != "hi\n0\n" || r.Stderr != "err\n" {
		t.Fatalf("runc run: %+v", r)
	}
	b = NewBundle(t, BundleOptions{Args: sh("exit 7"), UID: 65534, GID: 65534})
	if r := RunC(t, runc, b, "exit"); r.Exit != 7 {
		t.Fatalf("runc run of exit 7: %+v", r)
	}
}

// The workdir bound at /workspace: a write inside is the host file.
func TestRuncWorkspaceBind(t *testing.T) {
	runc := Runc(t)
	work := t.TempDir()
	must(t, os.WriteFile(filepath.Join(work, "in"), []byte("from host\n"), 0o644))
	b := NewBundle(t, BundleOptions{
		Args:  sh("cat /workspace/in; echo from container > /workspace/out; cat /proc/net/dev | wc -l"),
		Binds: []Bind{{Host: work, Container: "/workspace"}},
		Cwd:   "/workspace",
	})
	r := RunC(t, runc, b, "bind")
	// A fresh network namespace has lo alone: two header lines and one.
	if r.Exit != 0 || r.Stdout != "from host\n3\n" {
		t.Fatalf("runc run: %+v", r)
	}
	got, err := os.ReadFile(filepath.Join(work, "out"))
	if err != nil || string(got) != "from container\n" {
		t.Fatalf("host side of /workspace/out: %q, %v", got, err)
	}
}

// create, start, wait, delete; spec hooks at createRuntime and poststop.
func TestRuncLifecycleSpecHooks(t *testing.T) {
	runc := Runc(t)
	rec := NewRecorder(t)
	b := NewBundle(t, BundleOptions{
		Args:        sh("echo started; exit 3"),
		Annotations: map[string]string{"io.klock.manifest": "/m.yaml"},
		Hooks: &specs.Hooks{
			CreateRuntime: []specs.Hook{rec.Hook("createRuntime")},
			Poststop:      []specs.Hook{rec.Hook("poststop")},
		},
	})
	c := Create(t, runc, b, "life")
	calls := rec.Calls(t)
	if len(calls) != 1 || calls[0].Stage != "createRuntime" {
		t.Fatalf("after create: %+v", calls)
	}
	cr := calls[0]
	if cr.State.Status != specs.StateCreating || cr.State.Pid != c.Pid || cr.State.ID != "life" ||
		cr.State.Bundle != b.Dir || cr.State.Annotations["io.klock.manifest"] != "/m.yaml" {
		t.Errorf("createRuntime state: %+v (init %d)", cr.State, c.Pid)
	}
	// The hook sees the init before exec: runc's init, in the container's
	// cgroup (runc's default path /<id>) already; its cwd is the bundle,
	// its env exactly the hook's.
	if cr.Comm != "runc:[2:INIT]" || !strings.Contains(cr.Cgroup, "0::/life\n") || cr.Cwd != b.Dir ||
		!slices.Contains(cr.Env, "KLOCK_REC_DIR="+rec.Dir) || len(cr.Env) > 3 {
		t.Errorf("createRuntime sees comm %q cgroup %q cwd %q env %q", cr.Comm, cr.Cgroup, cr.Cwd, cr.Env)
	}
	if s := c.State(); s.Status != specs.StateCreated || s.Pid != c.Pid {
		t.Errorf("state after create: %+v", s)
	}
	c.Start()
	r := c.Wait()
	if r.Exit != 3 || r.Stdout != "started\n" {
		t.Errorf("wait: %+v", r)
	}
	if n := len(rec.Calls(t)); n != 1 {
		t.Errorf("%d hook calls before delete, want 1 (poststop runs at delete)", n)
	}
	c.Delete()
	calls = rec.Calls(t)
	if len(calls) != 2 || calls[1].Stage != "poststop" {
		t.Fatalf("after delete: %+v", calls)
	}
	if ps := calls[1].State; ps.Status != specs.StateStopped || ps.Pid != 0 || ps.ID != "life" ||
		ps.Annotations["io.klock.manifest"] != "/m.yaml" {
		t.Errorf("poststop state: %+v", ps)
	}
}

// runc run calls the same hooks.
func TestRuncRunSpecHooks(t *testing.T) {
	runc := Runc(t)
	rec := NewRecorder(t)
	b := NewBundle(t, BundleOptions{Args: sh("true"), Hooks: &specs.Hooks{
		CreateRuntime: []specs.Hook{rec.Hook("createRuntime")},
		Poststop:      []specs.Hook{rec.Hook("poststop")},
	}})
	if r := RunC(t, runc, b, "runhooks"); r.Exit != 0 {
		t.Fatalf("runc run: %+v", r)
	}
	if calls := rec.Calls(t); len(calls) != 2 || calls[0].Stage != "createRuntime" || calls[1].Stage != "poststop" {
		t.Fatalf("hook calls: %+v", calls)
	}
}

// One busybox image per test binary for the engines.
var (
	imgOnce           sync.Once
	imgDir            string
	rootfsTar, ociTar string
)

func images(t *testing.T) (string, string) {
	imgOnce.Do(func() {
		d, err := os.MkdirTemp("", "ctrtest-img")
		must(t, err)
		imgDir = d
		rootfs := BusyboxRootfs(t, filepath.Join(d, "rootfs"))
		rootfsTar = RootfsTar(t, rootfs, filepath.Join(d, "rootfs.tar"))
		ociTar = OCIArchive(t, rootfs, "docker.io/klock/busybox:latest", filepath.Join(d, "oci.tar"))
	})
	if rootfsTar == "" {
		t.Fatal("the busybox images could not be built (see the first test)")
	}
	return rootfsTar, ociTar
}

func TestMain(m *testing.M) {
	code := m.Run()
	if imgDir != "" {
		os.RemoveAll(imgDir)
	}
	os.Exit(code)
}

func TestPodmanRun(t *testing.T) {
	p := Podman(t)
	tarball, _ := images(t)
	img := p.Import(tarball, "localhost/klock-busybox:latest")
	work := t.TempDir()
	r := p.Run("--network", "none", "-v", work+":/workspace", "--annotation", "io.klock.x=1", img,
		"sh", "-c", "echo hi > /workspace/out; cat /proc/net/dev | wc -l; echo hi")
	if r.Exit != 0 || r.Stdout != "3\nhi\n" {
		t.Fatalf("podman run: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "hi\n" {
		t.Fatalf("workspace: %q %v", b, err)
	}
	t.Run("bridge", func(t *testing.T) {
		network, gw := p.Bridge()
		// The host listens on every address; the container reaches it at
		// the bridge's gateway.
		ln, err := net.Listen("tcp4", ":0")
		must(t, err)
		defer ln.Close()
		got := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- err.Error()
				return
			}
			defer c.Close()
			b, _ := io.ReadAll(c)
			got <- string(b)
		}()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		r := p.Run("--network", network, img, "sh", "-c", "ip -o -4 addr show eth0; echo hello | nc "+gw+" "+port)
		if r.Exit != 0 || !strings.Contains(r.Stdout, strings.TrimSuffix(gw, "1")) {
			t.Fatalf("podman run --network %s: %+v", network, r)
		}
		if g := <-got; g != "hello\n" {
			t.Fatalf("the host's listener read %q", g)
		}
	})
	t.Run("runtime", func(t *testing.T) {
		rr := NewRuntimeRecorder(t, p.Runtime)
		p.Runtime = rr.Path
		defer func() { p.Runtime = Runc(t) }()
		if r := p.Run("--network", "none", "--annotation", "io.klock.manifest=/m.yaml", img, "true"); r.Exit != 0 {
			t.Fatalf("podman run --runtime wrapper: %+v", r)
		}
		if s := rr.Spec(t); s == nil || s.Annotations["io.klock.manifest"] != "/m.yaml" {
			t.Errorf("the runtime's spec lacks the annotation: %+v", s)
		} else {
			t.Logf("podman: root.path %s cgroupsPath %s rlimits %v hooks %+v", s.Root.Path, s.Linux.CgroupsPath, s.Process.Rlimits, s.Hooks)
		}
		calls := rr.Argv(t)
		t.Logf("podman's runtime argv: %q", calls)
		if len(calls) < 3 || !strings.HasPrefix(calls[0], "create --bundle ") || !strings.Contains(calls[0], " --pid-file ") ||
			!strings.HasPrefix(calls[1], "start ") || !strings.HasPrefix(calls[len(calls)-1], "delete --force ") {
			t.Fatalf("podman's runtime argv: %q", calls)
		}
	})
	t.Run("rlimits", func(t *testing.T) {
		// Without the ulimits, where root cannot raise RLIMIT_NOFILE past
		// its hard limit, podman's default 1048576 fails in runc.
		var lim [2]uint64
		b, _ := os.ReadFile("/proc/self/limits")
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[0] == "Max" && f[1] == "open" {
				lim[1], _ = strconv.ParseUint(f[4], 10, 64)
			}
		}
		r := p.Cmd("run", "--rm", "--network", "none", img, "true")
		t.Logf("plain podman run (hard nofile %d here): exit %d %s", lim[1], r.Exit, strings.TrimSpace(r.Stderr))
	})
}

func TestPodmanHooksD(t *testing.T) {
	p := Podman(t)
	tarball, _ := images(t)
	img := p.Import(tarball, "localhost/klock-busybox:latest")
	rec := NewRecorder(t)
	WriteHooksD(t, p.HooksDir, "klock", rec.Hook("hooksd"), `^io\.klock\.manifest$`, "createRuntime", "poststop")

	if r := p.Run("--network", "none", img, "true"); r.Exit != 0 {
		t.Fatalf("podman run: %+v", r)
	}
	if calls := rec.Calls(t); len(calls) != 0 {
		t.Fatalf("the hook ran for a container without the annotation: %+v", calls)
	}
	r := p.Run("--network", "none", "--annotation", "io.klock.manifest=/m.yaml", img, "sh", "-c", "echo ran")
	if r.Exit != 0 || r.Stdout != "ran\n" {
		t.Fatalf("podman run: %+v", r)
	}
	calls := rec.Calls(t)
	if len(calls) != 2 {
		t.Fatalf("hook calls: %+v", calls)
	}
	cr, ps := calls[0], calls[1]
	id := cr.State.ID
	if cr.State.Status != specs.StateCreating || cr.State.Pid == 0 || cr.Comm != "runc:[2:INIT]" ||
		!strings.Contains(cr.Cgroup, "0::/libpod_parent/libpod-"+id+"\n") ||
		cr.State.Annotations["io.klock.manifest"] != "/m.yaml" || cr.Cwd != cr.State.Bundle {
		t.Errorf("createRuntime: %+v\ncgroup %q comm %q cwd %q", cr.State, cr.Cgroup, cr.Comm, cr.Cwd)
	}
	// poststop is run by podman itself (not runc), after the runtime
	// deleted the container: no pid, podman's cwd, the hook's env alone.
	if ps.State.Status != specs.StateStopped || ps.State.ID != id || ps.State.Pid != 0 ||
		ps.State.Annotations["io.klock.manifest"] != "/m.yaml" || ps.State.Bundle != cr.State.Bundle {
		t.Errorf("poststop: %+v", ps.State)
	}
	t.Logf("createRuntime: cwd %s env %q\npoststop: cwd %s env %q", cr.Cwd, cr.Env, ps.Cwd, ps.Env)
}

func TestContainerdRun(t *testing.T) {
	c := Containerd(t)
	_, archive := images(t)
	img := c.Import(archive, "docker.io/klock/busybox:latest")
	rr := NewRuntimeRecorder(t, Runc(t))
	work := t.TempDir()
	r := c.Run(rr.Path, img, "ctd1", []string{"--mount", "type=bind,src=" + work + ",dst=/workspace,options=rbind:rw",
		"--annotation", "io.klock.manifest=/m.yaml"},
		"sh", "-c", "echo hi > /workspace/out; echo hi")
	if r.Exit != 0 || r.Stdout != "hi\n" {
		t.Fatalf("ctr run: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "hi\n" {
		t.Fatalf("workspace: %q %v", b, err)
	}
	if s := rr.Spec(t); s == nil || s.Annotations["io.klock.manifest"] != "/m.yaml" {
		t.Errorf("the runtime's spec lacks the annotation: %+v", s)
	} else {
		t.Logf("containerd: root.path %s cgroupsPath %s rlimits %v", s.Root.Path, s.Linux.CgroupsPath, s.Process.Rlimits)
	}
	calls := rr.Argv(t)
	t.Logf("containerd's runtime argv: %q", calls)
	if len(calls) == 0 || !strings.HasPrefix(calls[0], "--root /run/containerd/runc/"+c.Namespace+" --log ") ||
		!strings.Contains(calls[0], " create --bundle ") {
		t.Fatalf("containerd's runtime argv: %q", calls)
	}
}

func TestDockerRun(t *testing.T) {
	rr := NewRuntimeRecorder(t, Runc(t))
	d := Docker(t, map[string]DockerRuntime{"wrapped": {Path: rr.Path, Args: []string{"--debug"}}})
	tarball, _ := images(t)
	img := d.Import(tarball, "klock/busybox:latest")
	work := t.TempDir()
	r := d.Run("--network", "none", "--runtime", "wrapped", "-v", work+":/workspace", "--label", "io.klock.manifest=/m.yaml", img,
		"sh", "-c", "echo hi > /workspace/out; echo hi")
	if r.Exit != 0 || r.Stdout != "hi\n" {
		t.Fatalf("docker run: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "hi\n" {
		t.Fatalf("workspace: %q %v", b, err)
	}
	// Docker 20.10 (API 1.41) has no --annotation and labels never reach
	// the spec: a manifest comes from runtime.yaml or runtimeArgs.
	if s := rr.Spec(t); s == nil || s.Annotations["io.klock.manifest"] != "" || s.Linux.CgroupsPath == "" {
		t.Errorf("the runtime's spec: %+v", s)
	} else {
		t.Logf("docker: root.path %s cgroupsPath %s annotations %v", s.Root.Path, s.Linux.CgroupsPath, s.Annotations)
	}
	calls := rr.Argv(t)
	t.Logf("dockerd's runtime argv: %q", calls)
	// runtimeArgs come first, before runc's --root and the command.
	if len(calls) == 0 || !strings.HasPrefix(calls[0], "--debug --root ") || !strings.Contains(calls[0], " create --bundle ") {
		t.Fatalf("dockerd's runtime argv: %q", calls)
	}
}

// A createRuntime hook that fails fails the create: the container never
// runs, runc says which hook and quotes its stderr, and still runs the
// poststop hooks.
func TestRuncFailingCreateRuntimeHook(t *testing.T) {
	runc := Runc(t)
	rec := NewRecorder(t)
	bad := rec.Hook("createRuntime")
	bad.Env = append(bad.Env, "KLOCK_REC_EXIT=5")
	work := t.TempDir()
	b := NewBundle(t, BundleOptions{
		Args:  sh("touch /workspace/ran"),
		Binds: []Bind{{Host: work, Container: "/workspace"}},
		Hooks: &specs.Hooks{CreateRuntime: []specs.Hook{bad}, Poststop: []specs.Hook{rec.Hook("poststop")}},
	})
	r := RunC(t, runc, b, "badhook")
	t.Logf("runc run with a failing createRuntime hook: %+v", r)
	// The hook's stderr is quoted in runc's error.
	if r.Exit == 0 || !strings.Contains(r.Stderr, "exit status 5") || !strings.Contains(r.Stderr, "failing with 5 as asked") {
		t.Fatalf("runc run: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(work, "ran")); err == nil {
		t.Fatal("the container ran")
	}
	var stages []string
	for _, c := range rec.Calls(t) {
		stages = append(stages, c.Stage)
	}
	// runc still runs the poststop hooks after a failed createRuntime.
	if !slices.Equal(stages, []string{"createRuntime", "poststop"}) {
		t.Errorf("hooks called: %q", stages)
	}
	_, c := TryCreate(t, runc, NewBundle(t, BundleOptions{Args: sh("true"), Hooks: &specs.Hooks{CreateRuntime: []specs.Hook{bad}}}), "badcreate")
	if c.Exit == 0 {
		t.Fatalf("runc create: %+v", c)
	}
	t.Logf("runc create with a failing createRuntime hook: %+v", c)
}

// A container killed through the runtime: Wait reports 128+SIGKILL.
func TestRuncKill(t *testing.T) {
	runc := Runc(t)
	c := Create(t, runc, NewBundle(t, BundleOptions{Args: sh("echo up; exec sleep 100")}), "kill")
	c.Start()
	if r := c.Cmd("kill", c.ID, "KILL"); r.Exit != 0 {
		t.Fatalf("kill: %+v", r)
	}
	if r := c.Wait(); r.Exit != 137 {
		t.Fatalf("wait: %+v", r)
	}
	c.Delete()
}
