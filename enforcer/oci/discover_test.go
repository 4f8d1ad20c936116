package oci

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/policy"
)

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", manifestYAML())
	other := writeFile(t, dir, "other.yaml", manifestYAML("PROVIDES FILE:/workspace/out/**"))
	bad := writeFile(t, dir, "bad.yaml", strings.Replace(manifestYAML(), "apiVersion: klock/v1", "apiVersion: klock/v1\nbogus: 1", 1))
	cfg := &Config{File: "/etc/klock/runtime.yaml", Manifests: []Mapping{
		{Match: Match{ID: "agent-*"}, Manifest: good, Line: 3, Col: 5},
		{Match: Match{Annotation: "role=agent"}, Manifest: other},
		{Match: Match{ID: "broken"}, Manifest: bad},
	}}
	ann := func(kv ...string) *specs.Spec {
		s := &specs.Spec{Annotations: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		spec    *specs.Spec
		id      string
		cfg     *Config
		path    string // want Found.Path
		source  string // want substring of Found.Source
		none    bool
		errIs   []error
		errText string
	}{
		{name: "annotation path", spec: ann(AnnotationManifest, good), id: "x", cfg: cfg, path: good, source: "annotation io.klock.manifest"},
		{name: "annotation wins over mapping", spec: ann(AnnotationManifest, other), id: "agent-1", cfg: cfg, path: other},
		{name: "annotation inline", spec: ann(AnnotationManifest, manifestYAML()), id: "x", cfg: cfg, path: "", source: "(inline)"},
		{name: "mapping by id", spec: ann(), id: "agent-7", cfg: cfg, path: good, source: "/etc/klock/runtime.yaml:3:5 manifests[0]"},
		{name: "mapping by annotation", spec: ann("role", "agent"), id: "web", cfg: cfg, path: other, source: "manifests[1]"},
		{name: "first match wins", spec: ann("role", "agent"), id: "agent-2", cfg: cfg, path: good},
		{name: "none", spec: ann(), id: "web", cfg: cfg, none: true},
		{name: "containerd sandbox", spec: ann(AnnotationManifest, good, "io.kubernetes.cri.container-type", "sandbox"), id: "agent-1", cfg: cfg, none: true},
		{name: "CRI-O sandbox", spec: ann(AnnotationManifest, good, "io.kubernetes.cri-o.ContainerType", "sandbox"), id: "agent-1", cfg: cfg, none: true},
		{name: "sandbox, required", spec: ann("io.kubernetes.cri.container-type", "sandbox"), id: "p", cfg: &Config{Require: true}, none: true},
		{name: "CRI container", spec: ann(AnnotationManifest, good, "io.kubernetes.cri.container-type", "container"), id: "x", cfg: cfg, path: good},
		{name: "none, nil config", spec: &specs.Spec{}, id: "web", none: true},
		{name: "none, nil spec", id: "web", none: true},
		{name: "required", spec: ann(), id: "web", cfg: &Config{Require: true, File: "/etc/klock/runtime.yaml"}, errIs: []error{ErrManifestRequired}, errText: "container web"},
		{name: "missing file", spec: ann(AnnotationManifest, filepath.Join(dir, "nope.yaml")), id: "x", errIs: []error{ErrManifest, fs.ErrNotExist}},
		{name: "invalid file", spec: ann(), id: "broken", cfg: cfg, errIs: []error{ErrManifest, policy.ErrInvalidManifest}, errText: bad + ":2:1"},
		{name: "invalid inline", spec: ann(AnnotationManifest, "apiVersion: klock/v1\n"), id: "x", errIs: []error{ErrManifest, policy.ErrInvalidManifest}, errText: "io.klock.manifest:"},
		{name: "empty annotation", spec: ann(AnnotationManifest, " "), id: "x", errIs: []error{ErrManifest}},
		{name: "path with newline is inline", spec: ann(AnnotationManifest, good+"\n"), id: "x", errIs: []error{policy.ErrInvalidManifest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Discover(tc.spec, tc.id, tc.cfg)
			if tc.errIs != nil {
				for _, want := range tc.errIs {
					if !errors.Is(err, want) {
						t.Fatalf("err = %v; want errors.Is %v", err, want)
					}
				}
				if !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v; want it to contain %q", err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.none {
				if f != nil {
					t.Fatalf("found %+v; want none", f)
				}
				return
			}
			if f == nil || f.Manifest == nil || f.Path != tc.path || !strings.Contains(f.Source, tc.source) || len(f.Data) == 0 {
				t.Fatalf("found %+v; want path %q source ~%q", f, tc.path, tc.source)
			}
			if want := tc.path; want != "" && f.Annotation() != want {
				t.Fatalf("Annotation() = %q; want the path", f.Annotation())
			}
			if tc.path == "" && f.Annotation() != string(f.Data) {
				t.Fatal("inline Annotation() is not the manifest")
			}
		})
	}
}

func TestAllowRoot(t *testing.T) {
	s := &specs.Spec{Annotations: map[string]string{AnnotationAllowRoot: "true"}}
	if !AllowRoot(s, nil) || AllowRoot(&specs.Spec{}, nil) || !AllowRoot(&specs.Spec{}, &Config{AllowRoot: true}) ||
		AllowRoot(&specs.Spec{Annotations: map[string]string{AnnotationAllowRoot: "yes"}}, &Config{}) {
		t.Fatal("AllowRoot")
	}
}

// FuzzManifestAnnotation: the path/inline decision is exactly "starts with
// / and is one line", and Discover on any annotation value returns a
// manifest or an ErrManifest, never a panic and never nothing.
func FuzzManifestAnnotation(f *testing.F) {
	for _, s := range []string{"/etc/klock/a.yaml", "/a\nb", "apiVersion: klock/v1\n", "{}", "", "/", "//x", "/\r", " /a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		isPath := IsManifestPath(v)
		want := len(v) > 0 && v[0] == '/' && !strings.ContainsAny(v, "\r\n")
		if isPath != want {
			t.Fatalf("IsManifestPath(%q) = %v", v, isPath)
		}
		spec := &specs.Spec{Annotations: map[string]string{AnnotationManifest: v}}
		found, err := Discover(spec, "c", nil)
		if err == nil {
			if found == nil || found.Manifest == nil {
				t.Fatalf("Discover(%q) found nothing and no error", v)
			}
			if isPath != (found.Path != "") {
				t.Fatalf("Discover(%q): path %q, decision %v", v, found.Path, isPath)
			}
			return
		}
		if !errors.Is(err, ErrManifest) {
			t.Fatalf("Discover(%q) = %v; want ErrManifest", v, err)
		}
	})
}
