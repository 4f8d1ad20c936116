//go:build linux

package oci

import (
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
)

// NewAdoptRequest is what the createRuntime hook asks klockd for container
// id, whose bundle holds spec (as the runtime runs it: rewritten by
// klock-runtime when it ran create) and whose manifest is found, its
// paths mapped to the host by pm. The init's pid is the hook's to fill in:
// klock-runtime prepares the request at create, before there is one.
func NewAdoptRequest(spec *specs.Spec, id, bundle string, found *Found, pm PathMap) *wire.AdoptRequest {
	req := &wire.AdoptRequest{Manifest: found.Data, ManifestPath: found.Path, ContainerID: id, Bundle: bundle}
	if req.ManifestPath == "" {
		req.ManifestPath = found.Source
	}
	for _, e := range pm.Entries() {
		req.Mounts = append(req.Mounts, wire.Mount{Container: e.Container, Host: e.Host})
	}
	if spec.Annotations[AnnotationRuntime] == RuntimeFull {
		req.WallFile = filepath.Join(StateDir(id), WallFileName)
	}
	if u := spec.Process; u != nil {
		req.UID, req.GID = u.User.UID, u.User.GID
		req.Groups = u.User.AdditionalGids
		req.Cwd = u.Cwd
	}
	return req
}
