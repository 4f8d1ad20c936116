//go:build linux

package launch

import (
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/enforcer/nshelper"
)

// Init must be the first call in main() of every binary that calls Start
// (and in TestMain of its tests): without klock-stage2 installed beside the
// binary, Start re-executes the binary itself as "stage 2", and Init is
// where stage 2 runs (stage2.Init). In any other process Init returns at
// once. In stage 2 it never returns: it execs the agent, or reports why it
// could not and exits.
func Init() {
	nshelper.Init()    // the observer's helper for a container's root (enforcer/nshelper)
	stage2.ProbeInit() // the canary probe of a container adopted through hooks alone
	stage2.Init()
}
