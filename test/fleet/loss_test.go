package fleet

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lease/etcdstore"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// run is one session on the fleet's store, in the background.
type run struct {
	id      string
	out     *bufio.Reader
	started chan struct{}
	done    chan struct{}
	res     *session.Result
	err     error
	logs    *testutil.SyncBuffer
}

func start(t *testing.T, w *harness.World, store *etcdstore.Store, mode policy.Mode, ttl time.Duration, script string) *run {
	t.Helper()
	sh := harness.Real(t, "/bin/sh")
	data := []byte(harness.ManifestYAML(w.Workdir, mode, []string{"PROVIDES PROC:" + sh,
		"PROVIDES PROC:" + harness.Real(t, "/usr/bin/sleep"), "MUTATES FILE:" + w.W("a") + "/**", "PROVIDES FILE:" + w.W("a") + "/**"}))
	m, err := policy.Parse("m.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &run{id: harness.NewID(), out: bufio.NewReader(outR), started: make(chan struct{}), done: make(chan struct{}), logs: &testutil.SyncBuffer{}}
	t.Cleanup(func() {
		select {
		case <-r.done:
		case <-time.After(60 * time.Second):
			t.Errorf("session %s did not end", r.id)
		}
		outR.Close()
	})
	go func() {
		defer close(r.done)
		defer outW.Close()
		r.res, r.err = session.Run(context.Background(), session.Options{
			Manifest: m, ManifestData: data, ManifestPath: "m.yaml", ID: r.id, Command: []string{"/bin/sh", "-c", script},
			Backend: harness.Backend(), Backends: harness.Shared(), User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID},
			Snapshot: session.Backup(nil), Stdout: outW, Stderr: outW, Leases: store, LeaseTTL: ttl,
			Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Started: func(int) { close(r.started) },
		})
	}()
	return r
}

func (r *run) line(t *testing.T, want string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		s, _ := r.out.ReadString('\n')
		got <- strings.TrimSpace(s)
	}()
	select {
	case s := <-got:
		if s != want {
			t.Fatalf("session %s said %q, want %q\n%s", r.id, s, want, r.logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("session %s did not say %q", r.id, want)
	}
}

func (r *run) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(within):
		t.Fatalf("session %s still runs\n%s", r.id, r.logs.String())
	}
}

func (r *run) log(t *testing.T) *vlog.Log {
	t.Helper()
	lg, err := vlog.Read(r.res.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// oneMemberFleet is a one-member etcd (pausing it is losing the whole cluster)
// and this host's store on it.
func oneMemberFleet(t *testing.T) (*etcdtest.Cluster, *etcdstore.Store) {
	testutil.RequirePrivileged(t)
	c := etcdtest.Start(t, 1)
	s := etcdstore.New(c.Client(t), "/loss", "host-a")
	t.Cleanup(func() { s.Close() })
	return c, s
}

// With the fleet's etcd unreachable past the leases' TTL, another host
// may be granted what a strict session changes: it is killed and rolled
// back, and its log says the store stopped answering and since when.
func TestEtcdLossKillsAStrictSession(t *testing.T) {
	c, store := oneMemberFleet(t)
	w := harness.NewWorld(t)
	w.File(w.W("a", "x"), "a v1\n")
	r := start(t, w, store, policy.ModeStrict, 9*time.Second, "echo 'a v2' > a/x; echo up; exec sleep 60")
	r.line(t, "up")
	<-r.started
	c.Members[0].Pause()
	defer c.Members[0].Resume()
	r.wait(t, 60*time.Second)
	if r.res == nil || !r.res.Killed || !r.res.Interrupted {
		t.Fatalf("after etcd stopped answering: %v %+v\n%s", r.err, r.res, r.logs.String())
	}
	for _, want := range []string{"has not answered since", "etcd unavailable", "while they are still its own"} {
		if !strings.Contains(r.res.Reason, want) {
			t.Errorf("the reason does not say %q: %q", want, r.res.Reason)
		}
	}
	if got := w.Content(w.W("a", "x")); got != "a v1\n" {
		t.Errorf("a/x = %q, want it rolled back\nrollback: %+v\n%s", got, r.log(t).Rollback, r.logs.String())
	}
	lg := r.log(t)
	if len(lg.LeaseStalls) != 1 || lg.LeaseStalls[0].Outcome != "lost" || lg.LeaseStalls[0].Frozen {
		t.Fatalf("the log's lease stalls: %+v", lg.LeaseStalls)
	}
	if !strings.Contains(lg.Exit.Reason, "has not answered since") {
		t.Errorf("the log's exit reason: %q", lg.Exit.Reason)
	}
}

// A permissive session is frozen while its leases cannot be renewed: its
// agent makes no progress until etcd answers again (then it is thawed and
// goes on), or the leases run out (then it ends).
func TestEtcdStallFreezesAPermissiveSession(t *testing.T) {
	c, store := oneMemberFleet(t)
	w := harness.NewWorld(t)
	w.Dir(w.W("a"))
	ticks := w.W("a", "ticks")
	r := start(t, w, store, policy.ModePermissive, 9*time.Second,
		"echo up; while [ ! -e a/stop ]; do echo t >> a/ticks; sleep 0.05; done; echo done")
	r.line(t, "up")
	<-r.started
	events := filepath.Join(cgroupDir(t), r.id, "cgroup.events")
	c.Members[0].Pause()
	waitFor(t, events, "frozen 1")
	before := size(t, ticks)
	time.Sleep(time.Second)
	if after := size(t, ticks); after != before {
		t.Fatalf("the agent wrote %d bytes while frozen", after-before)
	}
	c.Members[0].Resume()
	waitFor(t, events, "frozen 0")
	for end := time.Now().Add(30 * time.Second); size(t, ticks) == before; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the agent made no progress after the thaw")
		}
	}
	w.File(w.W("a", "stop"), "")
	r.line(t, "done")
	r.wait(t, 30*time.Second)
	if r.err != nil || r.res.Killed {
		t.Fatalf("the thawed session: %v %+v", r.err, r.res)
	}
	lg := r.log(t)
	if len(lg.LeaseStalls) != 1 || !lg.LeaseStalls[0].Frozen || lg.LeaseStalls[0].Outcome != "renewed" || lg.LeaseStalls[0].Length() <= 0 {
		t.Fatalf("the log's lease stalls: %+v", lg.LeaseStalls)
	}
}

func cgroupDir(t *testing.T) string {
	mp, err := cgroup.Mountpoint()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(mp, "klock")
}

// waitFor waits until the file holds the line want.
func waitFor(t *testing.T, path, want string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want+"\n") {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s never said %q: %s", path, want, b)
		}
	}
}

func size(t *testing.T, p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// A permissive session whose leases run out while it is frozen (etcd
// away past the TTL) ends: it may no longer change what they covered.
func TestEtcdLossEndsAFrozenPermissiveSession(t *testing.T) {
	c, store := oneMemberFleet(t)
	w := harness.NewWorld(t)
	w.Dir(w.W("a"))
	r := start(t, w, store, policy.ModePermissive, 3*time.Second, "echo up; exec sleep 60")
	r.line(t, "up")
	<-r.started
	c.Members[0].Pause()
	defer c.Members[0].Resume()
	r.wait(t, 60*time.Second)
	if r.res == nil || !r.res.Killed || !r.res.Interrupted || !strings.Contains(r.res.Reason, "has not renewed") {
		t.Fatalf("a permissive session past its leases' TTL: %v %+v", r.err, r.res)
	}
	lg := r.log(t)
	if len(lg.LeaseStalls) != 1 || !lg.LeaseStalls[0].Frozen || lg.LeaseStalls[0].Outcome != "lost" {
		t.Fatalf("the log's lease stalls: %+v", lg.LeaseStalls)
	}
}
