//go:build linux

package daemon

import (
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

// recorder is an Observer that writes down what it is told.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

func (r *recorder) SessionAdmitted(kind string) { r.add("admitted " + kind) }

func (r *recorder) SessionRunning(kind string, _ time.Duration) { r.add("running " + kind) }

func (r *recorder) SessionEnded(kind string, mode policy.Mode, res *session.Result, err error) {
	verdict := "no result"
	if res != nil && res.Log != nil {
		verdict = res.Log.Verdict
	}
	r.add(fmt.Sprintf("ended %s %s %s %v", kind, mode, verdict, err))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// A container session klockd adopts (a real process waiting in its own
// cgroup, as runc init waits for runc start) is told to Config.Observer
// as one of kind container, from admission to its end.
func TestObserverSeesContainerSessions(t *testing.T) {
	rec := &recorder{}
	s := startServer(t, Config{Observer: rec})
	_, _, data := manifest(t, policy.ModeStrict, "PROVIDES PROC:/bin/**")
	g, err := cgroup.Create(fmt.Sprintf("observer-test-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Delete()
	cgfd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer cgfd.Close()
	init := exec.Command("/bin/sh", "-c", "read go; exec /usr/bin/true")
	release, err := init.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	init.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgfd.Fd()),
		Credential: &syscall.Credential{Uid: agentUID, Gid: agentUID}}
	if err := init.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Kill(); _ = init.Wait() }()
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Adopt(&AdoptRequest{Manifest: data, ManifestPath: "agent.yaml", ContainerID: "observer-test", Pid: init.Process.Pid,
		Cgroup: g.Path, Mounts: []wire.Mount{{Container: "/", Host: "/"}}, UID: agentUID, GID: agentUID, AllowDegraded: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	release.Close()
	res, err := cl.End("observer-test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The poststop hook's result comes as soon as the log is written,
	// the session's end just after: wait for it (a bound on a hang).
	for deadline := time.Now().Add(time.Minute); len(rec.list()) < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	want := []string{"admitted container", "running container", "ended container strict CLEAN <nil>"}
	if got := rec.list(); !slices.Equal(got, want) {
		t.Fatalf("the observer was told %q, want %q (result %+v)", got, want, res)
	}
}
