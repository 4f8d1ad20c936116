package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
)

func writePlugin(t *testing.T, dir, manifest, entry string) string {
	t.Helper()
	d := filepath.Join(dir, "p")
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, ManifestFile), []byte(manifest), 0o644)
	os.WriteFile(filepath.Join(d, "run.sh"), []byte(entry), 0o755)
	return d
}

func TestLoadAndScope(t *testing.T) {
	dir := t.TempDir()
	d := writePlugin(t, dir, `{"name":"greenfood.order","version":"1.0.0","entry":"run.sh","capabilities":["tool.greenfood.order.invoke"],
"permissions":{"network":["api.example.com:443/tcp"],"filesystem":{"read":["/etc/hostname"],"write":["/tmp/x/**"]},"internal_api":["greenfood"]}}`, "#!/bin/sh\necho {}\n")
	p, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	if p.Interpreter == "" || !p.Serves("tool.greenfood.order.invoke") || p.Serves("tool.other.invoke") {
		t.Fatalf("plugin: %+v", p)
	}
	m, data, err := SessionManifest(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROVIDES PROC:" + p.EntryPath, "PROVIDES PROC:" + p.Interpreter, "MUTATES FILE:/tmp/x/**", "CONSUMES NET:api.example.com:443/tcp", "CONSUMES FILE:/etc/hostname"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("scope lacks %s:\n%s", want, data)
		}
	}
	if m.Mode != "strict" {
		t.Fatalf("mode %s", m.Mode)
	}
	// Default: read-only, no network.
	d2 := writePlugin(t, t.TempDir(), `{"name":"ro","version":"1","entry":"run.sh","capabilities":["tool.ro.invoke"]}`, "#!/bin/sh\n")
	p2, err := Load(d2)
	if err != nil {
		t.Fatal(err)
	}
	_, data, _ = SessionManifest(p2, t.TempDir())
	if strings.Contains(string(data), "MUTATES") || strings.Contains(string(data), "NET:") {
		t.Fatalf("default scope is not read-only without network:\n%s", data)
	}
}

func TestLoadRefusesBadManifests(t *testing.T) {
	cases := map[string]string{
		"unknown field":   `{"name":"a","version":"1","entry":"run.sh","capabilities":["tool.a.invoke"],"hooks":1}`,
		"network true":    `{"name":"a","version":"1","entry":"run.sh","capabilities":["tool.a.invoke"],"permissions":{"network":true}}`,
		"filesystem true": `{"name":"a","version":"1","entry":"run.sh","capabilities":["tool.a.invoke"],"permissions":{"filesystem":true}}`,
		"entry escapes":   `{"name":"a","version":"1","entry":"../run.sh","capabilities":["tool.a.invoke"]}`,
		"no capability":   `{"name":"a","version":"1","entry":"run.sh","capabilities":[]}`,
		"bad capability":  `{"name":"a","version":"1","entry":"run.sh","capabilities":["admin"]}`,
		"no version":      `{"name":"a","entry":"run.sh","capabilities":["tool.a.invoke"]}`,
	}
	for name, m := range cases {
		d := writePlugin(t, t.TempDir(), m, "#!/bin/sh\n")
		if _, err := Load(d); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	d := writePlugin(t, t.TempDir(), `{"name":"a","version":"1","entry":"run.sh","capabilities":["tool.a.invoke"]}`, "#!/usr/bin/env sh\n")
	if _, err := Load(d); err == nil || !strings.Contains(err.Error(), "env") {
		t.Errorf("#!/usr/bin/env: %v", err)
	}
}

// TestFinerCapabilitiesAndCategoryA: a plugin may list a finer capability
// code than tool.<name>.invoke (seed 004's tool.energy.meter.read) and still
// load and serve; a plugin serving a category A tool may not ask for
// network or file system permissions.
func TestFinerCapabilitiesAndCategoryA(t *testing.T) {
	d := writePlugin(t, t.TempDir(), `{"name":"energy","version":"1","entry":"run.sh","capabilities":["tool.energy.meter.read"]}`, "#!/bin/sh\n")
	p, err := Load(d)
	if err != nil {
		t.Fatalf("a finer capability code stopped the plugin from loading: %v", err)
	}
	declared := func(cat, capability string) func(string) (*policy.Tool, bool) {
		return func(name string) (*policy.Tool, bool) {
			return &policy.Tool{Name: name, Category: cat, Capability: capability}, true
		}
	}
	if _, err := NewProvider(map[string]*Plugin{"energy": p}, declared("B", "tool.energy.meter.read"), &Runner{}); err != nil {
		t.Fatalf("finer code declared and listed: %v", err)
	}
	d2 := writePlugin(t, t.TempDir(), `{"name":"energy","version":"1","entry":"run.sh","capabilities":["tool.energy.invoke"]}`, "#!/bin/sh\n")
	p2, _ := Load(d2)
	if _, err := NewProvider(map[string]*Plugin{"energy": p2}, declared("B", "tool.energy.meter.read"), &Runner{}); err != nil {
		t.Fatalf("the tool's own plugin under a finer declared code: %v", err)
	}
	d3 := writePlugin(t, t.TempDir(), `{"name":"math","version":"1","entry":"run.sh","capabilities":["tool.math.invoke"],"permissions":{"network":["api.example.com:443/tcp"]}}`, "#!/bin/sh\n")
	p3, _ := Load(d3)
	if _, err := NewProvider(map[string]*Plugin{"math": p3}, declared("A", ""), &Runner{}); err == nil || !strings.Contains(err.Error(), "category A") {
		t.Fatalf("category A plugin with network: %v", err)
	}
	if _, err := NewProvider(map[string]*Plugin{"math": p3}, declared("B", ""), &Runner{}); err != nil {
		t.Fatalf("category B plugin with network: %v", err)
	}
}
