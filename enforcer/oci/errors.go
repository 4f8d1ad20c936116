package oci

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of this package.
var (
	// ErrConfig: /etc/klock/runtime.yaml is unreadable or invalid.
	ErrConfig = errors.New("klock runtime config")
	// ErrManifestRequired: the container names no manifest and the
	// configuration says require: true.
	ErrManifestRequired = errors.New("a klock manifest is required for every container (runtime.yaml require: true)")
	// ErrManifest: the manifest named for the container cannot be read or
	// is invalid.
	ErrManifest = errors.New("klock manifest")
	// ErrUnreachable: a changing intent (or the workdir) names a container
	// path no bind mount carries to the host, so klock could neither back it
	// up nor roll it back.
	ErrUnreachable = errors.New("manifest path not reachable on the host through the container's mounts")
	// ErrBadSpec: the OCI spec or the Plan cannot be rewritten.
	ErrBadSpec = errors.New("OCI spec")
	// ErrSpecFields: config.json holds fields this build does not know.
	ErrSpecFields = errors.New("OCI spec has fields klock-runtime does not know")
)

// ConfigError is a problem in runtime.yaml at a position. Line and Col
// are 1-based; zero means unknown.
type ConfigError struct {
	File      string
	Line, Col int
	Msg       string
}

func (e *ConfigError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// Unreached is one manifest path the mounts do not carry to the host.
type Unreached struct {
	What      string // the intent as written ("MUTATES FILE:/data/**") or "workdir"
	Container string // its container path
	Pos       string // where the manifest says it, when known
}

// ReachError lists every changing intent (and the workdir) that maps to no
// host path, with the bind mounts that could carry them.
type ReachError struct {
	Items []Unreached
	// Binds are the container's bind-mount destinations (where a path must
	// lie to reach the host), empty when there are none.
	Binds []string
}

func (e *ReachError) Error() string {
	var b strings.Builder
	b.WriteString("the container's mounts do not reach these manifest paths on the host, so klock could not back them up or roll them back:")
	for _, u := range e.Items {
		b.WriteString("\n  ")
		if u.Pos != "" {
			b.WriteString(u.Pos + ": ")
		}
		fmt.Fprintf(&b, "%s (container path %s)", u.What, u.Container)
	}
	if len(e.Binds) == 0 {
		b.WriteString("\nthey lie under mounts with no host directory (tmpfs, proc, ...); bind-mount a host directory there (e.g. docker run -v /srv/repo:/workspace) or declare paths on the root filesystem or under a bind mount")
	} else {
		fmt.Fprintf(&b, "\nbind mounts that reach the host: %s (and the root filesystem where no other mount covers it); declare paths under one of them, or add a bind mount that covers them", strings.Join(e.Binds, ", "))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUnreachable) true.
func (e *ReachError) Is(target error) bool { return target == ErrUnreachable }
