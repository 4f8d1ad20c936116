//go:build linux

package cri

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/klocklabs/klock/test/internal/harness"
)

// pod is what the kubelet asked for and what came of it.
type pod struct {
	sandbox, container string
	status             *cri.ContainerStatus
	stdout             string
	log                string // the container's CRI log
	// sandboxSpec is the sandbox's OCI spec as the runtime ran it.
	sandboxSpec *specs.Spec
}

// sandboxSpec is the sandbox's config.json in its bundle, as the runtime
// left it (klock-runtime rewrites the file; the CRI's own status shows
// containerd's spec from before).
func (n *node) sandboxSpec(t testing.TB, id string) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.ctd.Dir, "state", "io.containerd.runtime.v2.task", n.ctd.Namespace, id, "config.json"))
	must(t, err)
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil || s.Process == nil {
		t.Fatalf("the sandbox's config.json: %v; %.300s", err, b)
	}
	return &s
}

// runPod starts a pod (startPod) and waits for its container's exit.
func (n *node) runPod(t testing.TB, name, container, script string, podAnnotations ...map[string]string) *pod {
	t.Helper()
	p := n.startPod(t, name, container, script, podAnnotations...)
	p.status = n.exited(t, p.container)
	p.sandboxSpec = n.sandboxSpec(t, p.sandbox)
	p.stdout = stdout(t, p.log)
	return p
}

// startPod makes a kubelet's calls for a pod of RuntimeClass klock whose
// one container, named container, runs script in busybox with the workdir
// at /workspace: RunPodSandbox (runtime_handler klock, the node's
// network), CreateContainer, StartContainer. The pod is removed when t
// ends, as the kubelet removes a finished pod.
func (n *node) startPod(t testing.TB, name, container, script string, podAnnotations ...map[string]string) *pod {
	t.Helper()
	ctx := context.Background()
	logs := filepath.Join(n.dir, "logs", name)
	must(t, os.MkdirAll(logs, 0o755))
	// A hostNetwork pod: the kubelet sets no hostname (no UTS namespace).
	node := &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}
	var ann map[string]string
	if len(podAnnotations) > 0 {
		ann = podAnnotations[0]
	}
	sc := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		LogDirectory: logs,
		Labels:       map[string]string{"io.kubernetes.pod.name": name},
		Annotations:  ann,
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent:    n.cgroup,
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: node},
		},
	}
	rp, err := n.rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sc, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox (runtime_handler %s): %v", handler, err)
	}
	p := &pod{sandbox: rp.PodSandboxId, log: filepath.Join(logs, "agent.log")}
	t.Cleanup(func() { n.stop(t, p) })
	cc := &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: container},
		Image:    &cri.ImageSpec{Image: busyboxImage},
		Command:  []string{"sh", "-c", script},
		Mounts:   []*cri.Mount{{ContainerPath: "/workspace", HostPath: n.work}},
		LogPath:  "agent.log",
		Linux: &cri.LinuxContainerConfig{
			SecurityContext: &cri.LinuxContainerSecurityContext{NamespaceOptions: node},
		},
	}
	cr, err := n.rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: p.sandbox, Config: cc, SandboxConfig: sc})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	p.container = cr.ContainerId
	if _, err := n.rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: p.container}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return p
}

// stop removes the pod (and its container, if made) as the kubelet does
// once the pod is done.
func (n *node) stop(t testing.TB, p *pod) {
	ctx := context.Background()
	if p.container != "" {
		if _, err := n.rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: p.container}); err != nil {
			t.Errorf("RemoveContainer: %v", err)
		}
	}
	if _, err := n.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		t.Errorf("StopPodSandbox: %v", err)
	}
	if _, err := n.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		t.Errorf("RemovePodSandbox: %v", err)
	}
}

// TestKubeletCalls: a pod of RuntimeClass klock through containerd's CRI
// plugin. The agent container's declared write goes through, as nobody,
// with a CLEAN verification log naming the container; an undeclared write
// kills it (exit 137), the workdir is restored byte for byte, and the log
// names the container's path and rolls back the node's.
func TestKubeletCalls(t *testing.T) {
	n := newNode(t)
	t.Run("DeclaredWrite", func(t *testing.T) {
		p := n.runPod(t, "clean", "agent", "id -u; echo declared > /workspace/out.txt")
		if p.status.ExitCode != 0 || p.stdout != "65534\n" {
			t.Fatalf("agent: exit %d (%s), stdout %q; want 0 and uid 65534 (the rewritten spec's user)",
				p.status.ExitCode, p.status.Message, p.stdout)
		}
		if got := n.content("out.txt"); got != "declared\n" {
			t.Fatalf("out.txt = %q", got)
		}
		lg := n.log(t)
		if lg.Verdict != "CLEAN" || lg.Container == nil || lg.Container.ID != p.container || lg.Container.Mode != "runtime" {
			t.Fatalf("log: verdict %s, container %+v (want %s), violations %+v", lg.Verdict, lg.Container, p.container, lg.Violations)
		}
	})
	os.RemoveAll(filepath.Join(n.work, ".klock", "sessions"))
	os.Remove(filepath.Join(n.work, "out.txt"))

	t.Run("UndeclaredWrite", func(t *testing.T) {
		p := n.runPod(t, "kill", "agent", "echo declared > /workspace/out.txt; echo changed > /workspace/keep.txt; sleep 30")
		if p.status.ExitCode != 137 {
			t.Fatalf("agent: exit %d (%s), want 137 (killed)", p.status.ExitCode, p.status.Message)
		}
		if got := n.content("keep.txt"); got != "original\n" {
			t.Fatalf("keep.txt = %q after the kill, want it restored", got)
		}
		if got := n.content("out.txt"); got != "<absent>" {
			t.Fatalf("out.txt = %q after the kill, want it removed (the session made it)", got)
		}
		lg := n.log(t)
		if lg.Verdict == "CLEAN" || !lg.Exit.KilledByKlock || lg.Container == nil || lg.Container.ID != p.container {
			t.Fatalf("log: verdict %s, exit %+v, container %+v", lg.Verdict, lg.Exit, lg.Container)
		}
		harness.AssertContainerLogged(t, lg, "/workspace/keep.txt", filepath.Join(n.work, "keep.txt"))
	})
}

// TestPodAnnotation: the manifest as a pod annotation (io.klock.manifest,
// inline), which the kubelet passes in the sandbox's config and the
// handler's pod_annotations let through to the sandbox and every container
// of the pod. The container, which no runtime.yaml mapping names, runs
// under klock; the sandbox, which has the annotation too, is left alone:
// runc's spec as containerd wrote it, root, no klock session.
func TestPodAnnotation(t *testing.T) {
	n := newNode(t)
	m, err := os.ReadFile(filepath.Join(n.dir, "agent.yaml"))
	must(t, err)
	p := n.runPod(t, "annotated", "worker", "id -u; echo declared > /workspace/out.txt", map[string]string{"io.klock.manifest": string(m)})
	if p.status.ExitCode != 0 || p.stdout != "65534\n" || n.content("out.txt") != "declared\n" {
		t.Fatalf("worker: exit %d (%s), stdout %q, out.txt %q", p.status.ExitCode, p.status.Message, p.stdout, n.content("out.txt"))
	}
	if lg := n.log(t); lg.Verdict != "CLEAN" || lg.Container == nil || lg.Container.ID != p.container {
		t.Fatalf("log: verdict %s, container %+v (want %s)", lg.Verdict, lg.Container, p.container)
	}
	s := p.sandboxSpec
	if s.Annotations["io.klock.manifest"] != string(m) {
		t.Fatalf("the sandbox's spec lacks the pod's annotation (pod_annotations): %v", s.Annotations)
	}
	if s.Annotations["io.klock.runtime"] != "" || s.Process.User.UID != 0 || s.Process.Args[0] != "/bin/sleep" {
		t.Fatalf("klock-runtime rewrote the sandbox: annotations %v, user %+v, args %q", s.Annotations, s.Process.User, s.Process.Args)
	}
}

// TestExecSync: `kubectl exec` is the CRI's ExecSync, which containerd's
// shim turns into the runtime's exec: the new process starts behind the
// same wall, as nobody, and klockd judges it (a declared write goes
// through; an undeclared one kills the container, rolled back).
func TestExecSync(t *testing.T) {
	n := newNode(t)
	p := n.startPod(t, "exec", "agent", "sleep 60")
	ctx := context.Background()
	r, err := n.rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: p.container, Timeout: 60,
		Cmd: []string{"sh", "-c", "id -u; echo declared > /workspace/out.txt"}})
	if err != nil || r.ExitCode != 0 || string(r.Stdout) != "65534\n" {
		t.Fatalf("ExecSync: %v; exit %d, stdout %q, stderr %q", err, r.GetExitCode(), r.GetStdout(), r.GetStderr())
	}
	if got := n.content("out.txt"); got != "declared\n" {
		t.Fatalf("out.txt = %q", got)
	}
	r, err = n.rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: p.container, Timeout: 60,
		Cmd: []string{"sh", "-c", "echo changed > /workspace/keep.txt; sleep 30"}})
	t.Logf("undeclared ExecSync: %v; exit %d", err, r.GetExitCode())
	if st := n.exited(t, p.container); st.ExitCode != 137 {
		t.Fatalf("agent: exit %d (%s), want 137 (killed)", st.ExitCode, st.Message)
	}
	if got := n.content("keep.txt"); got != "original\n" {
		t.Fatalf("keep.txt = %q after the kill, want it restored", got)
	}
	lg := n.log(t)
	if !lg.Exit.KilledByKlock || lg.Container == nil || lg.Container.ID != p.container {
		t.Fatalf("log: verdict %s, exit %+v, container %+v", lg.Verdict, lg.Exit, lg.Container)
	}
	harness.AssertContainerLogged(t, lg, "/workspace/keep.txt", filepath.Join(n.work, "keep.txt"))
}
