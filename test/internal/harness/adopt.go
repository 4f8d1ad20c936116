//go:build linux

package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
)

// Adopted is how World.Adopt runs its "container": a process klock did
// not start, waiting in a cgroup of its own until the session has adopted
// it, as a container's init waits in the OCI createRuntime hook.
type Adopted struct {
	// Stage2: the process execs klock-stage2 (this test binary, whose
	// Main runs stage2.ContainerInit) with the wall the session wrote, as
	// klock-runtime's spec makes it do; false is hook-only mode.
	Stage2 bool
}

// Adopt runs s.Command as an adopted process (session.Options.Container,
// identity mounts: the process sees the host's paths) as AgentUID.
func (w *World) Adopt(s Spec, a Adopted) *Outcome {
	w.T.Helper()
	o, err := w.AdoptErr(s, a)
	if err != nil {
		w.T.Fatalf("session.Run (adopted): %v\nstderr:\n%s", err, o.Stderr)
	}
	// Hook-only mode proves its walls too: klock's probe tries the
	// canaries in the process's cgroup while it waits.
	w.checkCanaries(o, Backend(), s.WallNotEnforcing)
	return o
}

// AdoptErr is Adopt returning session.Run's error, with what the session
// left when it ran (a container's strict canary refusal ends a session
// that started: its log says so); the Outcome has only Stderr when it
// did not start.
func (w *World) AdoptErr(s Spec, a Adopted) (*Outcome, error) {
	w.T.Helper()
	mode, m, data, mpath := w.manifest(s)
	id := NewID()
	g, err := cgroup.Create("adopt-" + id)
	if err != nil {
		w.T.Fatal(err)
	}
	defer g.Delete()
	cgfd, err := g.OpenFD()
	if err != nil {
		w.T.Fatal(err)
	}
	defer cgfd.Close()

	args := s.Command
	var wall string
	if a.Stage2 {
		dir := w.T.TempDir()
		os.Chmod(dir, 0o755)
		wall = filepath.Join(dir, "wall.json")
		// The canaries' report pipe and their directory, as klock-runtime
		// makes the one and the container's spec mounts the other.
		report := filepath.Join(dir, "canary")
		if err := syscall.Mkfifo(report, 0o622); err != nil {
			w.T.Fatal(err)
		}
		os.Chmod(report, 0o622)
		w.canaryDir()
		// The suite's copy of the test binary, where the agent can run it.
		args = append([]string{Probe, stage2.WallFlag + wall, stage2.CanaryFlag + report, "--"}, args...)
	}
	// The "init": waits for one line on stdin (the session has adopted
	// it), then execs the entrypoint, as runc init waits for runc start.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read go; exec "$@"`, "init"}, args...)...)
	release, err := cmd.StdinPipe()
	if err != nil {
		w.T.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Dir = w.Workdir
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", ProbeEnv + "=1"}, s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgfd.Fd()),
		Credential: &syscall.Credential{Uid: AgentUID, Gid: AgentGID}}
	if err := cmd.Start(); err != nil {
		w.T.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	reaped := false
	defer func() {
		if !reaped {
			_ = g.Kill()
			<-waited
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := session.Run(ctx, session.Options{
		Manifest: m, ManifestPath: mpath, ManifestData: data, Mode: mode, ID: id,
		Backends: shared, Backend: Backend(), Snapshot: session.Backup(nil),
		Container: &session.Container{ID: "ctr-" + id, Pid: cmd.Process.Pid, Cgroup: g.Path,
			Mounts: []vlog.Mount{{Container: "/", Host: "/"}}, WallFile: wall, UID: AgentUID, GID: AgentGID},
		Started: func(int) {
			fmt.Fprintln(release, "go")
			release.Close()
		},
	})
	if res == nil {
		return &Outcome{Stderr: errb.String()}, err
	}
	// The session ended with the process; its output is complete once
	// it is reaped.
	<-waited
	reaped = true
	lg, lerr := vlog.Read(res.LogPath)
	if lerr != nil {
		w.T.Fatalf("read verification log: %v", lerr)
	}
	return &Outcome{Res: res, Log: lg, Stdout: out.String(), Stderr: errb.String(), Probe: ParseProbe(out.String()), ManifestPath: mpath}, err
}

// canaryDir gives the adopted process (identity mounts: the host's /run)
// an empty tmpfs of the agent's at the canaries' place until the test
// ends, as a container's spec mounts one there: its stage 2 makes the
// canaries' files in it.
func (w *World) canaryDir() {
	w.T.Helper()
	dir := stage2.CanaryDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.T.Fatal(err)
	}
	opts := fmt.Sprintf("size=4k,nr_inodes=4,mode=0755,uid=%d,gid=%d", AgentUID, AgentGID)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		w.T.Fatalf("the canaries' tmpfs on %s: %v", dir, err)
	}
	w.T.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}
