//go:build linux

package cri

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/klocklabs/klock/test/internal/harness"
)

// pod is what the kubelet asked for and what came of it.
type pod struct {
	sandbox, container string
	status             *cri.ContainerStatus
	stdout             string
}

// runPod makes a kubelet's calls for a pod of RuntimeClass klock whose one
// container, "agent", runs script in busybox with the workdir at
// /workspace: RunPodSandbox (runtime_handler klock, the node's network),
// CreateContainer, StartContainer; then it waits for the container's exit.
func (n *node) runPod(t testing.TB, name, script string) *pod {
	t.Helper()
	ctx := context.Background()
	logs := filepath.Join(n.dir, "logs", name)
	must(t, os.MkdirAll(logs, 0o755))
	// A hostNetwork pod: the kubelet sets no hostname (no UTS namespace).
	node := &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}
	sc := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		LogDirectory: logs,
		Labels:       map[string]string{"io.kubernetes.pod.name": name},
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent:    n.cgroup,
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: node},
		},
	}
	rp, err := n.rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sc, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("RunPodSandbox (runtime_handler %s): %v", handler, err)
	}
	p := &pod{sandbox: rp.PodSandboxId}
	cc := &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: "agent"},
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
	p.status = n.exited(t, p.container)
	p.stdout = stdout(t, filepath.Join(logs, "agent.log"))
	return p
}

// stop removes the pod as the kubelet does once its container is done.
func (n *node) stop(t testing.TB, p *pod) {
	ctx := context.Background()
	if _, err := n.rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: p.container}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := n.rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := n.rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
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
		p := n.runPod(t, "clean", "id -u; echo declared > /workspace/out.txt")
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
		n.stop(t, p)
	})
	os.RemoveAll(filepath.Join(n.work, ".klock", "sessions"))
	os.Remove(filepath.Join(n.work, "out.txt"))

	t.Run("UndeclaredWrite", func(t *testing.T) {
		p := n.runPod(t, "kill", "echo declared > /workspace/out.txt; echo changed > /workspace/keep.txt; sleep 30")
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
		n.stop(t, p)
	})
}
