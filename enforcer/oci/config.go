package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DefaultConfigPath is where klock-runtime reads its configuration.
const DefaultConfigPath = "/etc/klock/runtime.yaml"

// Runtimes are the OCI runtimes klock-runtime runs in front of by name
// (runtime: in runtime.yaml, --runtime): runc, the default, and crun. Both
// take runc's command line and run the spec's createRuntime and poststop
// hooks, which is all klock-runtime needs of them.
var Runtimes = []string{"runc", "crun"}

// Config is /etc/klock/runtime.yaml.
type Config struct {
	// RuntimePath is the real OCI runtime; empty means Runtime, else runc
	// on PATH, else crun.
	RuntimePath string `json:"runtime_path,omitempty"`
	// Runtime names the real OCI runtime (one of Runtimes) to find on
	// PATH when RuntimePath is empty.
	Runtime string `json:"runtime,omitempty"`
	// Require refuses containers that name no manifest.
	Require bool `json:"require,omitempty"`
	// AllowRoot keeps a container's uid/gid 0 (else it becomes 65534).
	AllowRoot bool `json:"allow_root,omitempty"`
	// Manifests map containers to manifests; the first match wins.
	Manifests []Mapping `json:"manifests,omitempty"`
	// File is where the configuration was read from ("" for defaults).
	File string `json:"-"`
}

// Mapping gives containers that match a manifest. Both conditions of Match
// must hold when both are written; at least one is.
type Mapping struct {
	Match    Match  `json:"match"`
	Manifest string `json:"manifest"` // absolute host path
	// Line and Col locate the mapping in the file, for Found.Source.
	Line, Col int `json:"-"`
}

// Match selects containers by id glob (path.Match syntax) and/or an
// annotation "key=value" (exact).
type Match struct {
	ID         string `json:"id,omitempty"`
	Annotation string `json:"annotation,omitempty"`
}

// Matches reports whether the container matches.
func (m Match) Matches(containerID string, annotations map[string]string) bool {
	if m.ID != "" {
		if ok, _ := path.Match(m.ID, containerID); !ok {
			return false
		}
	}
	if m.Annotation != "" {
		k, v, _ := strings.Cut(m.Annotation, "=")
		got, ok := annotations[k]
		if !ok || got != v {
			return false
		}
	}
	return m.ID != "" || m.Annotation != ""
}

// maxConfigBytes bounds runtime.yaml; a real one is a few hundred bytes.
const maxConfigBytes = 1 << 20

// LoadConfig reads runtime.yaml at file. A missing file is the defaults
// (no error): klock-runtime works with no configuration at all. Every other
// problem is a *ConfigError (errors.Is ErrConfig).
func LoadConfig(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, &ConfigError{File: file, Msg: err.Error()}
	}
	return ParseConfig(file, data)
}

// ParseConfig decodes runtime.yaml from data; file is used in positions.
// It is strict: an unknown field, a wrong type or a relative manifest path
// is an error at its line:col, since a typo in a security configuration
// (requier: true) must not pass silently.
func ParseConfig(file string, data []byte) (*Config, error) {
	cfg := &Config{File: file}
	if len(data) > maxConfigBytes {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("%d bytes; keep it under 1 MiB", len(data))}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(file, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return cfg, nil // empty file: defaults
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return cfg, nil
	}
	p := &configParser{file: file}
	err := p.mapping(root, "", func(key string, k, v *yaml.Node) error {
		switch key {
		case "runtime_path":
			s, err := p.str(v, key)
			if err != nil {
				return err
			}
			if s != "" && !path.IsAbs(s) {
				return p.at(v, "runtime_path: %q is not absolute; write the real runtime's full path (e.g. /usr/bin/runc), or leave it out for runc on PATH", s)
			}
			cfg.RuntimePath = s
		case "runtime":
			s, err := p.str(v, key)
			if err != nil {
				return err
			}
			if !slices.Contains(Runtimes, s) {
				return p.at(v, "runtime: %q; want one of %s (or runtime_path: /full/path for another)", s, strings.Join(Runtimes, ", "))
			}
			cfg.Runtime = s
		case "require":
			b, err := p.boolean(v, key)
			cfg.Require = b
			return err
		case "allow_root":
			b, err := p.boolean(v, key)
			cfg.AllowRoot = b
			return err
		case "manifests":
			if v.Kind != yaml.SequenceNode {
				if v.Tag == "!!null" {
					return nil
				}
				return p.at(v, "manifests: want a list of {match: {id: <glob>, annotation: key=value}, manifest: /abs/path}")
			}
			for i, item := range v.Content {
				m, err := p.mappingEntry(item, fmt.Sprintf("manifests[%d]", i))
				if err != nil {
					return err
				}
				cfg.Manifests = append(cfg.Manifests, m)
			}
		default:
			return p.at(k, "unknown field %q; want runtime_path, runtime, require, allow_root or manifests", key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

type configParser struct{ file string }

func (p *configParser) at(n *yaml.Node, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, args...)}
}

// mapping walks a YAML mapping's keys in order; duplicate keys are errors.
func (p *configParser) mapping(n *yaml.Node, field string, each func(key string, k, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		what := "the file"
		if field != "" {
			what = field
		}
		return p.at(n, "%s: want a mapping (key: value lines)", what)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.at(k, "%s: keys are plain names", field)
		}
		if seen[k.Value] {
			return p.at(k, "%s%s is written twice", prefix(field), k.Value)
		}
		seen[k.Value] = true
		if err := each(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

func prefix(field string) string {
	if field == "" {
		return ""
	}
	return field + "."
}

func (p *configParser) str(v *yaml.Node, field string) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		return "", p.at(v, "%s: want a string", field)
	}
	return v.Value, nil
}

func (p *configParser) boolean(v *yaml.Node, field string) (bool, error) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
		return false, p.at(v, "%s: want true or false", field)
	}
	var b bool
	if err := v.Decode(&b); err != nil {
		return false, p.at(v, "%s: want true or false", field)
	}
	return b, nil
}

func (p *configParser) mappingEntry(n *yaml.Node, field string) (Mapping, error) {
	m := Mapping{Line: n.Line, Col: n.Column}
	var hasMatch, hasManifest bool
	err := p.mapping(n, field, func(key string, k, v *yaml.Node) error {
		switch key {
		case "match":
			hasMatch = true
			return p.mapping(v, field+".match", func(key string, k, v *yaml.Node) error {
				s, err := p.str(v, field+".match."+key)
				if err != nil {
					return err
				}
				switch key {
				case "id":
					if _, err := path.Match(s, ""); err != nil || s == "" {
						return p.at(v, "%s.match.id: %q is not a glob (path.Match syntax: *, ?, [a-z])", field, s)
					}
					m.Match.ID = s
				case "annotation":
					if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
						return p.at(v, "%s.match.annotation: %q; want key=value, e.g. io.kubernetes.cri.container-name=agent", field, s)
					}
					m.Match.Annotation = s
				default:
					return p.at(k, "%s.match: unknown field %q; want id or annotation", field, key)
				}
				return nil
			})
		case "manifest":
			hasManifest = true
			s, err := p.str(v, field+".manifest")
			if err != nil {
				return err
			}
			if !path.IsAbs(s) || strings.ContainsRune(s, '\n') {
				return p.at(v, "%s.manifest: %q is not an absolute host path", field, s)
			}
			m.Manifest = path.Clean(s)
		default:
			return p.at(k, "%s: unknown field %q; want match and manifest", field, key)
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	switch {
	case !hasMatch || (m.Match.ID == "" && m.Match.Annotation == ""):
		return m, p.at(n, "%s: match is missing; want match: {id: <glob>} and/or match: {annotation: key=value} (a mapping that matches every container is require: true with one manifest: write id: \"*\")", field)
	case !hasManifest:
		return m, p.at(n, "%s: manifest is missing; want manifest: /abs/path/to/manifest.yaml", field)
	}
	return m, nil
}

// yamlError locates a YAML syntax error; yaml.v3 says "yaml: line N: ...".
func yamlError(file string, err error) error {
	msg := err.Error()
	e := &ConfigError{File: file, Msg: msg}
	var line int
	if _, scanErr := fmt.Sscanf(strings.TrimPrefix(msg, "yaml: "), "line %d:", &line); scanErr == nil && line > 0 {
		e.Line, e.Col = line, 1
		if _, rest, ok := strings.Cut(msg, ": line "); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				e.Msg = after
			}
		}
	}
	return e
}
