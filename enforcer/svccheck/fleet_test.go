package svccheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/internal/etcdtest"
)

// doctor's fleet row: none without a marker, reachable with the fleet's
// lease count, and unreachable with what to check.
func TestFleetRow(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "fleet.json")
	t.Setenv(fleet.MarkerEnv, marker)
	if f := checkFleet(context.Background()); f != nil {
		t.Fatalf("no marker, a fleet row: %+v", f)
	}
	c := etcdtest.Start(t, 1)
	if _, err := c.Client(t).Put(context.Background(), "/doc/lease/f/x\x00id", "{}"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(marker, []byte(fmt.Sprintf(`{"endpoints":[%q],"prefix":"/doc","host":"h1"}`, c.Endpoints()[0])), 0o644)
	if f := checkFleet(context.Background()); f == nil || !f.Reachable || f.Leases != 1 || f.Host != "h1" {
		t.Fatalf("a reachable fleet: %+v", f)
	}
	os.WriteFile(marker, []byte(`{"endpoints":["http://127.0.0.1:1"],"prefix":"/doc","host":"h1"}`), 0o644)
	if f := checkFleet(context.Background()); f == nil || f.Reachable || !strings.Contains(f.Why, "endpoint health") {
		t.Fatalf("an unreachable fleet: %+v", f)
	}
}
