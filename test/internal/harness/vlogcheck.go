//go:build linux

package harness

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// AssertContainerLogged checks a container session's log: a violation
// names the container's path, and its rollback the host's path of the same
// file.
func AssertContainerLogged(t testing.TB, lg *vlog.Log, container, host string) {
	t.Helper()
	if lg.Container == nil {
		t.Fatalf("the log names no container")
	}
	found := false
	for _, v := range lg.Violations {
		if strings.HasSuffix(v.Triple, ":"+container) {
			found = true
		}
	}
	if !found {
		b, _ := json.MarshalIndent(lg.Violations, "", " ")
		t.Fatalf("no violation on %s in the log: %s", container, b)
	}
	for _, op := range lg.Rollback {
		if op.Path == host && op.ContainerPath == container && op.OK {
			return
		}
	}
	b, _ := json.MarshalIndent(lg.Rollback, "", " ")
	t.Fatalf("no rollback of %s (container %s) in the log: %s", host, container, b)
}
