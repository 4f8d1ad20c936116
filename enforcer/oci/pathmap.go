package oci

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// PathMap maps the container's paths to the host's through its spec: the
// root filesystem is "/", a bind mount carries its destination to its
// source, and any other mount (proc, tmpfs, sysfs, ...) reaches no host
// path. The entries are the mounts still visible after every mount in
// order (a later mount at or above an earlier one's destination hides it),
// and the longest destination that contains a path decides it.
//
// It does not follow symbolic links inside the root filesystem (the
// runtime resolves mount destinations in the rootfs when it mounts them,
// and paths are judged as the kernel names them inside the container), so
// a manifest should name paths without them.
//
// It is plain data: it marshals to JSON as is, to travel to klockd.
type PathMap struct {
	Mounts []MapEntry `json:"mounts"`
}

// MapEntry is one visible mount.
type MapEntry struct {
	Container string `json:"container"` // destination, clean and absolute
	// Host is the host directory (or file) it shows; "" when the mount has
	// no host path (tmpfs, proc, ...).
	Host string `json:"host,omitempty"`
	Type string `json:"type,omitempty"` // "rootfs", "bind", or the mount's type
}

// NewPathMap builds the map from the spec; bundle is the bundle directory
// that a relative root.path and relative bind sources are relative to.
func NewPathMap(spec *specs.Spec, bundle string) (PathMap, error) {
	if spec == nil || spec.Root == nil || spec.Root.Path == "" {
		return PathMap{}, fmt.Errorf("%w: root.path is missing", ErrBadSpec)
	}
	var pm PathMap
	pm.add(MapEntry{Container: "/", Host: hostPath(bundle, spec.Root.Path), Type: "rootfs"})
	for _, m := range spec.Mounts {
		if m.Destination == "" {
			continue
		}
		e := MapEntry{Container: path.Clean("/" + m.Destination), Type: m.Type}
		if isBind(m) {
			if m.Source == "" {
				return PathMap{}, fmt.Errorf("%w: bind mount at %s has no source", ErrBadSpec, m.Destination)
			}
			e.Host, e.Type = hostPath(bundle, m.Source), "bind"
		}
		pm.add(e)
	}
	return pm, nil
}

func hostPath(bundle, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(bundle, p)
}

func isBind(m specs.Mount) bool {
	if m.Type == "bind" || m.Type == "rbind" {
		return true
	}
	return slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// add mounts e over the current entries: those at or below its
// destination are hidden.
func (pm *PathMap) add(e MapEntry) {
	pm.Mounts = slices.DeleteFunc(pm.Mounts, func(o MapEntry) bool { return within(o.Container, e.Container) })
	pm.Mounts = append(pm.Mounts, e)
}

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Entries returns the visible mounts, for the log.
func (pm PathMap) Entries() []MapEntry { return slices.Clone(pm.Mounts) }

// lookup returns the entry whose destination is the longest that
// contains the container path p.
func (pm PathMap) lookup(p string) (MapEntry, bool) {
	var best MapEntry
	found := false
	for _, e := range pm.Mounts {
		if within(p, e.Container) && (!found || len(e.Container) > len(best.Container)) {
			best, found = e, true
		}
	}
	return best, found
}

// ToHost maps a container path to the host path it shows; false when the
// mount that holds it has no host path (or p is not absolute).
func (pm PathMap) ToHost(containerPath string) (string, bool) {
	if !path.IsAbs(containerPath) {
		return "", false
	}
	p := path.Clean(containerPath)
	e, ok := pm.lookup(p)
	if !ok || e.Host == "" {
		return "", false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, e.Container), "/")
	if rel == "" {
		return e.Host, true
	}
	return filepath.Join(e.Host, rel), true
}

// ToContainer maps a host path back to the container path that shows it:
// the candidate through the longest host source, kept only when ToHost
// gives the same host path back (a hidden mount does not count). False
// when no visible mount shows it.
func (pm PathMap) ToContainer(hostPath string) (string, bool) {
	if !filepath.IsAbs(hostPath) {
		return "", false
	}
	h := filepath.Clean(hostPath)
	bestLen, best, found := -1, "", false
	for _, e := range pm.Mounts {
		if e.Host == "" || !within(h, e.Host) {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(h, e.Host), "/")
		c := e.Container
		if rel != "" {
			c = path.Join(e.Container, rel)
		}
		if back, ok := pm.ToHost(c); !ok || back != h {
			continue
		}
		if len(e.Host) > bestLen {
			bestLen, best, found = len(e.Host), c, true
		}
	}
	return best, found
}

// Binds returns the destinations of the visible bind mounts.
func (pm PathMap) Binds() []string {
	var out []string
	for _, e := range pm.Mounts {
		if e.Type == "bind" {
			out = append(out, e.Container)
		}
	}
	return out
}
