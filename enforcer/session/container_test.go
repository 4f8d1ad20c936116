//go:build linux

package session

import (
	"os"
	"slices"
	"testing"

	"github.com/klocklabs/klock/enforcer/nshelper"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

func testContainer() *Container {
	return &Container{ID: "c1", Mounts: []vlog.Mount{
		{Container: "/", Host: "/var/lib/ctr/rootfs"},
		{Container: "/workspace", Host: "/srv/repo"},
		{Container: "/workspace/cache", Host: ""}, // a tmpfs over part of a bind
		{Container: "/tmp", Host: ""},
		{Container: "/tmp/shared", Host: "/srv/shared"},
		{Container: "/etc/hosts", Host: "/run/ctr/hosts"},
	}}
}

// TestContainerPaths: the longest mount maps a path; a tmpfs (no host)
// maps nothing, also over part of a bind; the reverse names the most
// specific container path.
func TestContainerPaths(t *testing.T) {
	c := testContainer()
	for in, want := range map[string]string{
		"/workspace/src/a.go": "/srv/repo/src/a.go",
		"/workspace":          "/srv/repo",
		"/workspaces/x":       "/var/lib/ctr/rootfs/workspaces/x",
		"/usr/bin/sh":         "/var/lib/ctr/rootfs/usr/bin/sh",
		"/tmp/shared/f":       "/srv/shared/f",
		"/etc/hosts":          "/run/ctr/hosts",
		"/workspace/cache/x":  "",
		"/tmp/x":              "",
	} {
		got, ok := c.ToHost(in)
		if want == "" && ok || want != "" && got != want {
			t.Errorf("ToHost(%s) = %q %v, want %q", in, got, ok, want)
		}
	}
	if got, ok := c.ToContainer("/srv/repo/src/a.go"); !ok || got != "/workspace/src/a.go" {
		t.Errorf("ToContainer = %q %v", got, ok)
	}
	if _, ok := c.ToContainer("/home/other"); ok {
		t.Errorf("a host path no mount shows mapped")
	}
	if got := c.scratch(); !slices.Equal(got, []string{"/srv/shared", "/var/lib/ctr/rootfs/var/tmp", "/var/lib/ctr/rootfs/dev/shm", "/var/lib/ctr/rootfs/run/lock"}) {
		t.Errorf("scratch = %q", got)
	}
}

// TestHostManifest: the workdir, FILE and PROC intents move to the host
// (a PROC intent names the container's program, in its root filesystem,
// not the host's of the same name); an intent only the container has (a
// tmpfs) is left out; a workdir no mount shows is refused.
func TestHostManifest(t *testing.T) {
	c := testContainer()
	m := &policy.Manifest{Workdir: "/workspace"}
	for _, s := range []string{"MUTATES FILE:/workspace/src/**", "PROVIDES FILE:/tmp/scratch/**", "PROVIDES PROC:/usr/bin/*", "CONSUMES NET:10.0.0.1:443/tcp"} {
		in, err := policy.ParseIntent(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Intents = append(m.Intents, in)
	}
	h, err := c.hostManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range h.Intents {
		got = append(got, in.Predicate.String()+" "+in.Object.String())
	}
	want := []string{"MUTATES FILE:/srv/repo/src/**", "PROVIDES PROC:/var/lib/ctr/rootfs/usr/bin/*", "CONSUMES NET:10.0.0.1:443/tcp"}
	if h.Workdir != "/srv/repo" || !slices.Equal(got, want) {
		t.Fatalf("host manifest: workdir %s intents %q, want /srv/repo %q", h.Workdir, got, want)
	}
	if m.Workdir != "/workspace" || m.Intents[0].Object.Path.Path != "/workspace/src" {
		t.Fatalf("the container's manifest changed: %+v", m.Intents[0])
	}
	if _, err := c.hostManifest(&policy.Manifest{Workdir: "/tmp/work"}); err == nil {
		t.Fatalf("a workdir on a tmpfs was accepted")
	}
}

// TestMemfdNoexecLeavesTheHostsPidNamespace: a container in klockd's own
// pid namespace (--pid=host) would have the whole host's vm.memfd_noexec
// changed: it is left as it is, and the caller is told.
func TestMemfdNoexecLeavesTheHostsPidNamespace(t *testing.T) {
	before, err := os.ReadFile(nshelper.MemfdNoexecSysctl)
	if err != nil {
		t.Skip("no vm.memfd_noexec on this kernel")
	}
	shared, err := memfdNoexec(&Container{ID: "host-pid", Pid: os.Getpid()}, "")
	if err != nil || !shared {
		t.Fatalf("memfdNoexec of a container in our pid namespace = shared %v, %v; want shared, no error", shared, err)
	}
	if after, _ := os.ReadFile(nshelper.MemfdNoexecSysctl); string(after) != string(before) {
		t.Fatalf("the host's vm.memfd_noexec changed: %q -> %q", before, after)
	}
}
