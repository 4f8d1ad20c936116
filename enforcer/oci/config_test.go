package oci

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     func(*Config) bool
		err      string // substring, with the position
	}{
		{name: "empty", in: "", want: func(c *Config) bool { return !c.Require && c.RuntimePath == "" && len(c.Manifests) == 0 }},
		{name: "comment only", in: "# nothing\n", want: func(c *Config) bool { return !c.Require }},
		{name: "full", in: `runtime_path: /usr/bin/runc
require: true
allow_root: false
manifests:
  - match: {id: "agent-*"}
    manifest: /etc/klock/agents/a.yaml
  - match: {annotation: "io.kubernetes.cri.container-name=agent", id: "*"}
    manifest: /etc/klock/agents/../agents/b.yaml
`, want: func(c *Config) bool {
			return c.RuntimePath == "/usr/bin/runc" && c.Require && len(c.Manifests) == 2 &&
				c.Manifests[0].Match.ID == "agent-*" && c.Manifests[1].Manifest == "/etc/klock/agents/b.yaml" &&
				c.Manifests[1].Match.Annotation == "io.kubernetes.cri.container-name=agent" && c.Manifests[1].Line == 7
		}},
		{name: "unknown field", in: "require: true\nrequier: true\n", err: "runtime.yaml:2:1: unknown field \"requier\""},
		{name: "unknown match field", in: "manifests:\n  - match: {name: x}\n    manifest: /a\n", err: "runtime.yaml:2:13: manifests[0].match: unknown field \"name\""},
		{name: "unknown mapping field", in: "manifests:\n  - match: {id: x}\n    manifest: /a\n    mode: strict\n", err: "runtime.yaml:4:5: manifests[0]: unknown field \"mode\""},
		{name: "relative manifest", in: "manifests:\n  - match: {id: x}\n    manifest: a.yaml\n", err: "runtime.yaml:3:15: manifests[0].manifest: \"a.yaml\" is not an absolute host path"},
		{name: "runtime crun", in: "runtime: crun\n", want: func(c *Config) bool { return c.Runtime == "crun" && c.RuntimePath == "" }},
		{name: "unknown runtime", in: "runtime: youki\n", err: "runtime.yaml:1:10: runtime: \"youki\"; want one of runc, crun"},
		{name: "relative runtime", in: "runtime_path: runc\n", err: "runtime.yaml:1:15: runtime_path: \"runc\" is not absolute"},
		{name: "bad glob", in: "manifests:\n  - match: {id: \"[\"}\n    manifest: /a\n", err: "runtime.yaml:2:17: manifests[0].match.id: \"[\" is not a glob"},
		{name: "bad annotation", in: "manifests:\n  - match: {annotation: novalue}\n    manifest: /a\n", err: "manifests[0].match.annotation: \"novalue\"; want key=value"},
		{name: "no match", in: "manifests:\n  - manifest: /a\n", err: "runtime.yaml:2:5: manifests[0]: match is missing"},
		{name: "no manifest", in: "manifests:\n  - match: {id: x}\n", err: "runtime.yaml:2:5: manifests[0]: manifest is missing"},
		{name: "bool as string", in: "require: \"yes\"\n", err: "runtime.yaml:1:10: require: want true or false"},
		{name: "duplicate", in: "require: true\nrequire: false\n", err: "runtime.yaml:2:1: require is written twice"},
		{name: "not a mapping", in: "- a\n", err: "runtime.yaml:1:1: the file: want a mapping"},
		{name: "syntax", in: "require: [\n", err: "runtime.yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("runtime.yaml", []byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v; want one containing %q that is ErrConfig", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

// TestLoadConfigMissing: no runtime.yaml is the defaults, not an error.
func TestLoadConfigMissing(t *testing.T) {
	c, err := LoadConfig(filepath.Join(t.TempDir(), "runtime.yaml"))
	if err != nil || c.Require || c.RuntimePath != "" || len(c.Manifests) != 0 {
		t.Fatalf("LoadConfig(missing) = %+v, %v", c, err)
	}
	dir := t.TempDir()
	if _, err := LoadConfig(dir); !errors.Is(err, ErrConfig) {
		t.Fatalf("LoadConfig(a directory) = %v; want ErrConfig", err)
	}
}

func TestMatch(t *testing.T) {
	ann := map[string]string{"k": "v", "e": ""}
	for _, tc := range []struct {
		m    Match
		id   string
		want bool
	}{
		{Match{ID: "agent-*"}, "agent-1", true},
		{Match{ID: "agent-*"}, "web-1", false},
		{Match{Annotation: "k=v"}, "x", true},
		{Match{Annotation: "k=w"}, "x", false},
		{Match{Annotation: "e="}, "x", true},
		{Match{Annotation: "missing="}, "x", false},
		{Match{ID: "x", Annotation: "k=v"}, "x", true},
		{Match{ID: "y", Annotation: "k=v"}, "x", false},
		{Match{}, "x", false},
	} {
		if got := tc.m.Matches(tc.id, ann); got != tc.want {
			t.Errorf("%+v.Matches(%q) = %v", tc.m, tc.id, got)
		}
	}
}

// FuzzParseConfig: any input either parses into a configuration whose
// paths are absolute, or fails with a located ErrConfig; never a panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "require: true\n", "manifests:\n  - match: {id: \"a*\"}\n    manifest: /m.yaml\n",
		"runtime_path: /usr/bin/runc\nallow_root: true\n", "manifests: [{match: {annotation: a=b}, manifest: /x}]", "&a [*a]", "require: !!bool yes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := ParseConfig("runtime.yaml", []byte(in))
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			return
		}
		if c.RuntimePath != "" && !filepath.IsAbs(c.RuntimePath) {
			t.Fatalf("relative runtime_path %q accepted", c.RuntimePath)
		}
		for _, m := range c.Manifests {
			if !filepath.IsAbs(m.Manifest) || (m.Match.ID == "" && m.Match.Annotation == "") {
				t.Fatalf("mapping %+v accepted", m)
			}
		}
	})
}
