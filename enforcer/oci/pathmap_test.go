package oci

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/policy"
)

func testSpec() *specs.Spec {
	return &specs.Spec{
		Root: &specs.Root{Path: "rootfs"},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/workspace", Type: "bind", Source: "/srv/repo", Options: []string{"rbind", "rw"}},
			{Destination: "/workspace/cache", Type: "none", Source: "/var/cache/agent", Options: []string{"bind"}},
			{Destination: "/data", Source: "data", Options: []string{"rbind"}}, // relative to the bundle
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/etc/hosts", Type: "bind", Source: "/var/lib/c/hosts"},
			{Destination: "/hidden/inner", Type: "bind", Source: "/srv/inner"},
			{Destination: "/hidden", Type: "tmpfs", Source: "tmpfs"}, // hides /hidden/inner
			{Destination: "/shadow", Type: "bind", Source: "/srv/first"},
			{Destination: "/shadow/", Type: "bind", Source: "/srv/second"}, // same destination: the later wins
		},
	}
}

func TestPathMap(t *testing.T) {
	pm, err := NewPathMap(testSpec(), "/run/bundle")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c, h string
		ok   bool
	}{
		{"/", "/run/bundle/rootfs", true},
		{"/usr/bin/sh", "/run/bundle/rootfs/usr/bin/sh", true},
		{"/workspace", "/srv/repo", true},
		{"/workspace/src/a.go", "/srv/repo/src/a.go", true},
		{"/workspace/../workspace/x", "/srv/repo/x", true},
		{"/workspacex/y", "/run/bundle/rootfs/workspacex/y", true},
		{"/workspace/cache/m", "/var/cache/agent/m", true},
		{"/data/f", "/run/bundle/data/f", true},
		{"/etc/hosts", "/var/lib/c/hosts", true},
		{"/etc/passwd", "/run/bundle/rootfs/etc/passwd", true},
		{"/proc/self", "", false},
		{"/dev/null", "", false},
		{"/tmp/x", "", false},
		{"/hidden/inner/x", "", false},
		{"/shadow/x", "/srv/second/x", true},
		{"relative", "", false},
	} {
		h, ok := pm.ToHost(tc.c)
		if h != tc.h || ok != tc.ok {
			t.Errorf("ToHost(%q) = %q, %v; want %q, %v", tc.c, h, ok, tc.h, tc.ok)
		}
	}
	for _, tc := range []struct {
		h, c string
		ok   bool
	}{
		{"/srv/repo/src/a.go", "/workspace/src/a.go", true},
		{"/srv/repo", "/workspace", true},
		{"/var/cache/agent/m", "/workspace/cache/m", true},
		{"/run/bundle/rootfs/etc/passwd", "/etc/passwd", true},
		{"/run/bundle/rootfs/tmp/x", "", false}, // under the /tmp tmpfs: not visible
		{"/srv/inner/x", "", false},             // hidden by /hidden
		{"/srv/first/x", "", false},             // replaced by /srv/second
		{"/srv/second/x", "/shadow/x", true},
		{"/elsewhere", "", false},
		{"rel", "", false},
	} {
		c, ok := pm.ToContainer(tc.h)
		if c != tc.c || ok != tc.ok {
			t.Errorf("ToContainer(%q) = %q, %v; want %q, %v", tc.h, c, ok, tc.c, tc.ok)
		}
	}
	// It travels to klockd as JSON.
	data, err := json.Marshal(pm)
	if err != nil {
		t.Fatal(err)
	}
	var back PathMap
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, pm) {
		t.Fatalf("JSON round trip: %v\n%s", err, data)
	}
	if got := pm.Binds(); !reflect.DeepEqual(got, []string{"/workspace", "/workspace/cache", "/data", "/etc/hosts", "/shadow"}) {
		t.Fatalf("Binds() = %v", got)
	}
	e := pm.Entries()
	e[0].Host = "changed"
	if pm.Mounts[0].Host == "changed" {
		t.Fatal("Entries() shares the map's slice")
	}
}

func TestPathMapAbsoluteRoot(t *testing.T) {
	pm, err := NewPathMap(&specs.Spec{Root: &specs.Root{Path: "/var/lib/ctr/rootfs/"}}, "/b")
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := pm.ToHost("/x"); h != "/var/lib/ctr/rootfs/x" {
		t.Fatalf("ToHost = %q", h)
	}
	if _, err := NewPathMap(&specs.Spec{}, "/b"); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("no root: %v", err)
	}
	if _, err := NewPathMap(&specs.Spec{Root: &specs.Root{Path: "r"}, Mounts: []specs.Mount{{Destination: "/a", Type: "bind"}}}, "/b"); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("bind without source: %v", err)
	}
}

func TestCheckReach(t *testing.T) {
	pm, err := NewPathMap(testSpec(), "/run/bundle")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		extra   []string
		workdir string
		bad     []string // container paths named in the error
	}{
		{name: "all reachable", extra: []string{"PROVIDES FILE:/workspace/out/**", "MUTATES FILE:/etc/app.conf"}},
		{name: "reads anywhere", extra: []string{"CONSUMES FILE:/proc/**", "CONSUMES FILE:/tmp/**"}},
		{name: "tmpfs change", extra: []string{"MUTATES FILE:/tmp/**", "DELETES FILE:/dev/shm/x", "PROVIDES FILE:/workspace/ok"}, bad: []string{"/tmp", "/dev/shm/x"}},
		{name: "rename under proc", extra: []string{"RENAMES FILE:/proc/x"}, bad: []string{"/proc/x"}},
		{name: "workdir unreachable", workdir: "/tmp/work", bad: []string{"workdir /tmp/work", "/tmp/work"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := manifestYAML(tc.extra...)
			if tc.workdir != "" {
				y = strings.Replace(y, "workdir: /workspace", "workdir: "+tc.workdir, 1)
			}
			m, err := policy.Parse("m.yaml", []byte(y))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckReach(m, pm)
			if len(tc.bad) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var re *ReachError
			if !errors.As(err, &re) || !errors.Is(err, ErrUnreachable) {
				t.Fatalf("err = %v; want a *ReachError", err)
			}
			for _, b := range tc.bad {
				if !strings.Contains(err.Error(), b) {
					t.Errorf("error does not name %q:\n%v", b, err)
				}
			}
			if !strings.Contains(err.Error(), "/workspace") || !strings.Contains(err.Error(), "m.yaml:") {
				t.Errorf("error names neither the usable mounts nor the manifest position:\n%v", err)
			}
		})
	}
	if err := CheckReach(nil, pm); err != nil {
		t.Fatal(err)
	}
}
