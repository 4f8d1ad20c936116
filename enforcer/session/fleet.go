package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FleetMarker exists while this host's klockd shares its leases with a
// fleet (klockd --store etcd). An embedded run would decide leases from
// the host's journal alone, blind to the fleet's: it is refused.
const FleetMarker = "/run/klock/lease-store"

// WriteFleetMarker records that klockd's lease store is shared (what).
func WriteFleetMarker(what string) error {
	if err := os.MkdirAll(filepath.Dir(FleetMarker), 0o755); err != nil {
		return err
	}
	return os.WriteFile(FleetMarker, []byte(what+"\n"), 0o644)
}

// fleetRefusal is ErrSetup when klockd shares leases with a fleet.
func fleetRefusal() error {
	b, err := os.ReadFile(FleetMarker)
	if err != nil {
		return nil
	}
	return fmt.Errorf("%w: klockd on this host shares leases with a fleet (%s); an embedded run would not see them: run through klockd (klock run without --no-daemon; start klockd if it is not running), or remove %s if this host has left the fleet",
		ErrSetup, strings.TrimSpace(string(b)), FleetMarker)
}
