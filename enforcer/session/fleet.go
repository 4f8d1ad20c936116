package session

import (
	"errors"
	"fmt"

	"github.com/klocklabs/klock/enforcer/fleet"
)

// fleetRefusal is ErrSetup when klockd shares leases with a fleet
// (fleet.Marker): an embedded run would decide leases from the host's
// journal alone, blind to the fleet's.
func fleetRefusal() error {
	c, err := fleet.ReadMarker()
	if errors.Is(err, fleet.ErrNoFleet) {
		return nil
	}
	what := c.String()
	if err != nil {
		what = err.Error()
	}
	return fmt.Errorf("%w: klockd on this host shares leases with a fleet (%s); an embedded run would not see them: run through klockd (klock run without --no-daemon; start klockd if it is not running), or remove %s if this host has left the fleet",
		ErrSetup, what, fleet.MarkerPath())
}
