package oci

import (
	"fmt"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/oci/statedir"
	"github.com/klocklabs/klock/policy"
)

// Annotations klock reads and writes on a container's spec.
const (
	// AnnotationManifest names the manifest: a host path (one line starting
	// with "/") or the manifest itself. After a rewrite it holds exactly
	// what klock-runtime used, so the hook reads the same manifest.
	AnnotationManifest = "io.klock.manifest"
	// AnnotationAllowRoot = "true" keeps uid/gid 0 for this container.
	AnnotationAllowRoot = "io.klock.allow-root"
	// AnnotationRuntime = RuntimeFull says klock-runtime rewrote the spec
	// (full mode: Landlock and seccomp inside); absent means hook-only.
	AnnotationRuntime = statedir.AnnotationRuntime
	// RuntimeFull is AnnotationRuntime's value.
	RuntimeFull = statedir.RuntimeFull
)

// sandboxAnnotations mark a CRI pod's sandbox (the pause container), as
// containerd's CRI plugin and CRI-O set them. A pod's annotations reach its
// sandbox as they reach its containers (containerd's pod_annotations), but
// the sandbox runs no agent code: the node's pause image, which holds the
// pod's namespaces. Adopting it would make a session whose workdir is a
// directory of the pause image's root.
var sandboxAnnotations = map[string]string{
	"io.kubernetes.cri.container-type":  "sandbox", // containerd
	"io.kubernetes.cri-o.ContainerType": "sandbox", // CRI-O
}

// IsSandbox reports whether spec is a CRI pod's sandbox container.
func IsSandbox(spec *specs.Spec) bool {
	if spec == nil {
		return false
	}
	for k, v := range sandboxAnnotations {
		if spec.Annotations[k] == v {
			return true
		}
	}
	return false
}

// Found is the manifest a container runs under.
type Found struct {
	// Data is the manifest's bytes.
	Data []byte
	// Path is the host file it was read from; "" when inline.
	Path string
	// Source says where it was named, for messages and the log:
	// "annotation io.klock.manifest", "annotation io.klock.manifest (inline)"
	// or "/etc/klock/runtime.yaml:7:5 manifests[1]".
	Source string
	// Manifest is Data decoded and validated.
	Manifest *policy.Manifest
}

// Annotation is the value the rewritten spec carries in
// AnnotationManifest: the path when there is one, else the manifest.
func (f *Found) Annotation() string {
	if f.Path != "" {
		return f.Path
	}
	return string(f.Data)
}

// IsManifestPath decides how an io.klock.manifest value is read: a host
// path when it starts with "/" and is one line, else an inline manifest (a
// YAML or JSON manifest never starts with "/").
func IsManifestPath(v string) bool {
	return strings.HasPrefix(v, "/") && !strings.ContainsAny(v, "\n\r")
}

// Discover finds the container's manifest: the io.klock.manifest
// annotation, else the first runtime.yaml mapping that matches. None:
// nil, nil, unless cfg.Require (ErrManifestRequired). A CRI pod's sandbox
// (IsSandbox) has none, whatever its annotations, even with cfg.Require. A manifest that
// cannot be read or does not validate wraps ErrManifest (and, when invalid,
// the located *policy.ValidationError). cfg may be nil (defaults).
func Discover(spec *specs.Spec, containerID string, cfg *Config) (*Found, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if IsSandbox(spec) {
		return nil, nil
	}
	var ann map[string]string
	if spec != nil {
		ann = spec.Annotations
	}
	if v, ok := ann[AnnotationManifest]; ok {
		if strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("%w: annotation %s is empty; want a host path or the manifest itself", ErrManifest, AnnotationManifest)
		}
		if IsManifestPath(v) {
			return load(v, "annotation "+AnnotationManifest)
		}
		return parse(AnnotationManifest, "", []byte(v), "annotation "+AnnotationManifest+" (inline)")
	}
	for i, m := range cfg.Manifests {
		if m.Match.Matches(containerID, ann) {
			src := fmt.Sprintf("%s manifests[%d]", cfg.File, i)
			if m.Line > 0 {
				src = fmt.Sprintf("%s:%d:%d manifests[%d]", cfg.File, m.Line, m.Col, i)
			}
			return load(m.Manifest, src)
		}
	}
	if cfg.Require {
		where := cfg.File
		if where == "" {
			where = DefaultConfigPath
		}
		return nil, fmt.Errorf("container %s: %w (%s); name one with --annotation %s=/path/to/manifest.yaml or add a mapping to %s",
			containerID, ErrManifestRequired, where, AnnotationManifest, where)
	}
	return nil, nil
}

func load(file, source string) (*Found, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w named by %s: %w", ErrManifest, source, err)
	}
	return parse(file, file, data, source)
}

func parse(name, file string, data []byte, source string) (*Found, error) {
	m, err := policy.Parse(name, data)
	if err != nil {
		return nil, fmt.Errorf("%w named by %s: %w", ErrManifest, source, err)
	}
	return &Found{Data: data, Path: file, Source: source, Manifest: m}, nil
}

// AllowRoot reports whether the container keeps uid/gid 0: the annotation
// io.klock.allow-root=true or runtime.yaml allow_root.
func AllowRoot(spec *specs.Spec, cfg *Config) bool {
	if cfg != nil && cfg.AllowRoot {
		return true
	}
	return spec != nil && spec.Annotations[AnnotationAllowRoot] == "true"
}
