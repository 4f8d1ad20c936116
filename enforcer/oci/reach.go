package oci

import (
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// CheckReach refuses a manifest the container's mounts cannot carry: every
// FILE intent that changes something (policy.Changing) and the workdir must
// map to a host path, because the pre-flight backup and the rollback work
// on the host. A path under a tmpfs (or proc, ...) has none. The error is
// a *ReachError listing all of them at once.
func CheckReach(m *policy.Manifest, pm PathMap) error {
	if m == nil {
		return nil
	}
	var e ReachError
	if m.Workdir != "" {
		if _, ok := pm.ToHost(m.Workdir); !ok {
			e.Items = append(e.Items, Unreached{What: "workdir " + m.Workdir, Container: m.Workdir, Pos: posOf(m, "workdir")})
		}
	}
	for i, in := range m.Intents {
		// The baseline's device files (/dev/null) are not the agent's data.
		if in.Object.Type != policy.ObjFile || !policy.Changing.Has(in.Predicate) || strings.HasPrefix(in.Origin, "baseline:") {
			continue
		}
		p := in.Object.Path.Path
		if _, ok := pm.ToHost(p); ok {
			continue
		}
		e.Items = append(e.Items, Unreached{What: in.String(), Container: p, Pos: posOf(m, fmt.Sprintf("intents[%d]", i))})
	}
	if len(e.Items) == 0 {
		return nil
	}
	e.Binds = pm.Binds()
	return &e
}

func posOf(m *policy.Manifest, field string) string {
	p := m.Pos(field)
	if p.Line == 0 {
		return ""
	}
	return p.String()
}
