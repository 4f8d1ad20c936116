//go:build linux

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// outsideTmpWorld is harness.NewWorld with its directories outside the
// host's /tmp: a session whose workdir is in /tmp sees the host's /tmp
// (policy.Manifest.PrivateTmp), and these tests are about the private one.
// The probe lives in /tmp too, so the agents here are shell scripts.
func outsideTmpWorld(t *testing.T) *harness.World {
	t.Helper()
	testutil.RequirePrivileged(t)
	must(t, os.MkdirAll("/srv", 0o755))
	base, err := os.MkdirTemp("/srv", "klock-e2e-privtmp-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.Chmod(base, 0o755))
	w := &harness.World{T: t, Workdir: filepath.Join(base, "work"), Outside: filepath.Join(base, "outside")}
	w.Dir(w.Workdir)
	w.Dir(w.Outside)
	return w
}

// tools are the programs the scripts here run besides sh.
func tools(t *testing.T, intents ...string) []string {
	out := []string{"PROVIDES PROC:" + dash(t)}
	for _, p := range []string{"mkdir", "mv", "rm", "cat", "mktemp", "sleep"} {
		out = append(out, "PROVIDES PROC:"+harness.Real(t, "/usr/bin/"+p))
	}
	return append(out, intents...)
}

// plantInTmp puts a file the agent could write (its own, 0666) in the
// host's /tmp, removed when the test ends.
func plantInTmp(t *testing.T, w *harness.World, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "klock-planted-"+harness.NewID())
	w.File(p, "host\n")
	must(t, os.Chmod(p, 0o666))
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// TestPrivateTmpStrict: a strict session that writes /tmp/x and
// /var/tmp/y is CLEAN; the files are in its private directories, not in
// the host's /tmp, and a file planted in the host's /tmp beforehand is
// neither seen by the agent nor changed. Intents there lease nothing.
func TestPrivateTmpStrict(t *testing.T) {
	w := outsideTmpWorld(t)
	planted := plantInTmp(t, w, "/tmp")
	plantedVar := plantInTmp(t, w, "/var/tmp")
	id := harness.NewID()
	x, y := "/tmp/klock-x-"+id, "/var/tmp/klock-y-"+id
	script := `set -e
echo x > ` + x + `
echo y > ` + y + `
mkdir /tmp/d && echo z > /tmp/d/z && mv /tmp/d/z /tmp/d/w && rm /tmp/d/w
for p in ` + planted + ` ` + plantedVar + `; do if [ -e $p ]; then echo "visible $p"; fi; done
echo agent > ` + planted + `
echo done`
	data := []byte("tmp: private\n" + harness.ManifestYAML(w.Workdir, policy.ModeStrict, tools(t,
		"MUTATES FILE:${tmpdir}/**", "PROVIDES FILE:/tmp/**", "DELETES FILE:/tmp/**", "RENAMES FILE:/tmp/**",
		"PROVIDES FILE:/var/tmp/*",
	)))
	m, err := policy.Parse("m.yaml", data)
	must(t, err)
	var out, errb strings.Builder
	res, err := session.Run(t.Context(), session.Options{
		Manifest: m, ManifestData: data, ManifestPath: "m.yaml", ID: id, Command: []string{"/bin/sh", "-c", script},
		Backend: harness.Backend(), Backends: harness.Shared(), User: &launch.Credential{UID: harness.AgentUID, GID: harness.AgentGID},
		Snapshot: session.Backup(nil), Stdout: &out, Stderr: &errb, Leases: lease.NewTable(), KeepTmp: true,
	})
	must(t, err)
	priv := filepath.Join(session.PrivateTmpRoot, id)
	t.Cleanup(func() { os.RemoveAll(priv) })
	lg, err := vlog.Read(res.LogPath)
	must(t, err)
	o := &harness.Outcome{Res: res, Log: lg, Stdout: out.String(), Stderr: errb.String()}
	o.AssertClean(t, 0)
	if strings.Contains(o.Stdout, "visible") || !strings.Contains(o.Stdout, "done") {
		t.Errorf("agent's output %q: want done, and no host file visible", o.Stdout)
	}
	for _, p := range []string{x, y} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host %s: %v, want absent (the agent's is private)", p, err)
		}
	}
	for p, want := range map[string]string{
		filepath.Join(priv, "tmp", filepath.Base(x)):       "x\n",
		filepath.Join(priv, "vartmp", filepath.Base(y)):    "y\n",
		filepath.Join(priv, "tmp", filepath.Base(planted)): "agent\n",
		planted:    "host\n",
		plantedVar: "host\n",
	} {
		if got := w.Content(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	fi, err := os.Stat(filepath.Join(priv, "tmp"))
	must(t, err)
	if fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("private tmp mode %v, want sticky 0777", fi.Mode())
	}
	for _, l := range lg.Leases {
		if strings.Contains(l.Lease, "FILE:/tmp") || strings.Contains(l.Lease, "FILE:/var/tmp") {
			t.Errorf("lease %s taken for the private /tmp", l.Lease)
		}
	}
	var said bool
	for _, b := range lg.Backends {
		if b.Name == "private /tmp" && len(b.Details) > 0 && strings.Contains(b.Details[0], "host path "+filepath.Join(priv, "tmp")) {
			said = true
		}
	}
	if !said {
		t.Errorf("the log does not name the private /tmp's host path: %+v", lg.Backends)
	}
}

// TestPrivateTmpRolledBack: a strict kill empties the private /tmp (it
// started empty), and the host's /tmp is left alone.
func TestPrivateTmpRolledBack(t *testing.T) {
	w := outsideTmpWorld(t)
	planted := plantInTmp(t, w, "/tmp")
	w.File(w.O("secret"), "s\n")
	o := w.Run(harness.Spec{Manifest: []byte("tmp: private\n" + harness.ManifestYAML(w.Workdir, policy.ModeStrict, tools(t, "PROVIDES FILE:/tmp/**", "MUTATES FILE:/tmp/**"))),
		Command: []string{"/bin/sh", "-c", "echo a > /tmp/a; mkdir /tmp/d; echo b > /tmp/d/b; cat " + w.O("secret") + "; sleep 1"}})
	if !o.Res.Killed {
		t.Fatalf("not killed\n%s", o.Dump())
	}
	removed := map[string]bool{}
	for _, r := range o.Log.Rollback {
		if !r.OK {
			t.Errorf("rollback of %s failed: %s", r.Path, r.Error)
		}
		if r.Action == "removed" {
			removed[r.Path] = true
		}
	}
	if !removed["/tmp/a"] || !removed["/tmp/d"] {
		t.Errorf("rollback %+v: want /tmp/a and /tmp/d removed", o.Log.Rollback)
	}
	if got := w.Content(planted); got != "host\n" {
		t.Errorf("host's %s = %q", planted, got)
	}
	if _, err := os.Lstat(filepath.Join(session.PrivateTmpRoot, o.Res.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("private /tmp left after the session (no KeepTmp): %v", err)
	}
}

// TestPrivateTmpNoLeaseConflict: two sessions that both declare
// MUTATES, PROVIDES and DELETES on /tmp/** run at once on one lease
// store: each has its own /tmp, so neither waits for the other.
func TestPrivateTmpNoLeaseConflict(t *testing.T) {
	w := outsideTmpWorld(t)
	store := lease.NewTable()
	intents := tools(t, "MUTATES FILE:/tmp/**", "PROVIDES FILE:/tmp/**", "DELETES FILE:/tmp/**", "CONSUMES FILE:/tmp/**")
	a := startLeased(t, w, leasedSpec{leases: store, intents: intents, tmp: "private", script: "echo a > /tmp/f; echo started; read x; cat /tmp/f; rm /tmp/f"})
	a.line("started")
	b := startLeased(t, w, leasedSpec{leases: store, intents: intents, tmp: "private", script: "echo b > /tmp/f; echo started; read x; cat /tmp/f; rm /tmp/f"})
	b.line("started")
	a.release()
	a.line("a")
	b.release()
	b.line("b")
	for _, l := range []*leased{a, b} {
		<-l.done
		if l.err != nil {
			t.Fatalf("session %s: %v", l.id, l.err)
		}
		if l.res.Killed || l.res.Exit.ExitCode() != 0 {
			t.Errorf("session %s: killed %v (%s), exit %v\n%s", l.id, l.res.Killed, l.res.Reason, l.res.Exit, l.logs.String())
		}
	}
}

// TestTmpHost: tmp: host keeps the host's /tmp: the agent sees a file
// planted there, and the session holds the lease on /tmp/**, so a second
// such session conflicts.
func TestTmpHost(t *testing.T) {
	w := outsideTmpWorld(t)
	planted := plantInTmp(t, w, "/tmp")
	store := lease.NewTable()
	intents := tools(t, "MUTATES FILE:/tmp/**", "PROVIDES FILE:/tmp/**")
	a := startLeased(t, w, leasedSpec{leases: store, intents: intents, tmp: "host",
		script: "cat " + planted + "; echo agent >> " + planted + "; echo started; read x"})
	a.line("host")
	a.line("started")
	b := startLeased(t, w, leasedSpec{leases: store, intents: intents, tmp: "host", script: "echo never"})
	<-b.done
	if !errors.Is(b.err, session.ErrLeaseConflict) {
		t.Errorf("second tmp: host session: %v, want a lease conflict", b.err)
	}
	a.release()
	<-a.done
	if a.err != nil || a.res.Killed {
		t.Fatalf("tmp: host session: %v %+v\n%s", a.err, a.res, a.logs.String())
	}
	if got := w.Content(planted); got != "host\nagent\n" {
		t.Errorf("host's %s = %q, want the agent's line appended", planted, got)
	}
	var held bool
	for _, l := range a.res.Log.Leases {
		held = held || l.Lease == "MUTATES FILE:/tmp/**"
	}
	if !held {
		t.Errorf("tmp: host session held no MUTATES FILE:/tmp/** lease: %+v", a.res.Log.Leases)
	}
}

// TestPrivateTmpLearn: a learning run that makes files in /tmp and
// /var/tmp writes ${tmpdir}/** and /var/tmp/** intents (the private
// /tmp's, never a host path), and the learned manifest's strict run is
// CLEAN.
func TestPrivateTmpLearn(t *testing.T) {
	w := outsideTmpWorld(t)
	cmd := []string{"/bin/sh", "-c", `set -e
d=$(mktemp -d /tmp/build.XXXXXX)
echo obj > $d/a.o
mv $d/a.o $d/b.o
cat $d/b.o
rm -r $d
echo note > /var/tmp/note.txt
echo ok > ` + w.W("out.txt")}
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Backend: session.BackendObserve,
		Manifest: []byte("tmp: private\n" + harness.ManifestYAML(w.Workdir, policy.ModePermissive, tools(t))),
		Command:  cmd})
	if o.Res.Killed || o.Res.Exit.ExitCode() != 0 || o.Res.Learned == nil {
		t.Fatalf("learning run failed or learned nothing\n%s", o.Dump())
	}
	learned := string(o.Res.Learned)
	if !strings.Contains(learned, "FILE:${tmpdir}/**") || !strings.Contains(learned, "FILE:/var/tmp/**") || strings.Contains(learned, "FILE:/tmp") {
		t.Errorf("learned manifest has no ${tmpdir}/** and /var/tmp/** intents, or a host /tmp path:\n%s", learned)
	}
	if strings.Contains(learned, "/tmp/build.") {
		t.Errorf("learned manifest names the run's own temporary directory:\n%s", learned)
	}
	// The rerun makes out.txt again, as the learning run did.
	must(t, os.Remove(w.W("out.txt")))
	o2 := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: o.Res.Learned, Command: cmd})
	o2.AssertClean(t, 0)
}

// TestPrivateTmpNamesWhatExitedProcessesDid: path-based metadata changes
// by short-lived processes in the private /tmp (a build's chmod of its
// a.out, by relative name) are named as the agent saw them, /tmp/..., even
// when the process is gone before the observer reads its record: by the
// agent's mount table, never klock's, where the same file is at its host
// path under the private root, which no intent declares.
func TestPrivateTmpNamesWhatExitedProcessesDid(t *testing.T) {
	w := outsideTmpWorld(t)
	chmod, touch := harness.Real(t, "/usr/bin/chmod"), harness.Real(t, "/usr/bin/touch")
	script := `set -e
mkdir /tmp/build && cd /tmp/build
i=0
while [ $i -lt 40 ]; do
	echo x > a$i.out
	` + chmod + ` 755 a$i.out
	` + touch + ` -m a$i.out
	i=$((i+1))
done
echo done`
	o := w.Run(harness.Spec{Mode: policy.ModeStrict,
		Manifest: []byte(harness.ManifestYAML(w.Workdir, policy.ModeStrict, tools(t,
			"PROVIDES PROC:"+chmod, "PROVIDES PROC:"+touch,
			"PROVIDES FILE:${tmpdir}/**", "MUTATES FILE:${tmpdir}/**"))),
		Command: []string{"/bin/sh", "-c", script}})
	o.AssertClean(t, 0)
	if !strings.Contains(o.Stdout, "done") {
		t.Errorf("agent's output %q, want done", o.Stdout)
	}
	for _, ob := range o.Log.Observed {
		if strings.Contains(ob.Triple, session.PrivateTmpRoot) {
			t.Errorf("observed %s: named at its host path, not the agent's", ob.Triple)
		}
	}
}
