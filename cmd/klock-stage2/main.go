// Command klock-stage2 is stage 2 of every klock session (package
// enforcer/launch/stage2): klock and klockd run it, when it is installed
// beside them, to set a session up and exec the agent. It does what their
// own re-executed binary would, and starts sooner because it is small.
// klock-runtime also puts it first in a container's process.args, where it
// enforces the container's Landlock wall and execs the entrypoint. klockd
// also runs it as the helper that acts inside a container's namespaces
// (enforcer/nshelper), for the same reason.
package main

import (
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/enforcer/nshelper"
)

func main() {
	stage2.ContainerInit() // returns only when not first in a container's process.args
	stage2.ProbeInit()     // returns only when not klockd's canary probe (a hook-only container's)
	nshelper.Init()        // returns only when not klockd's namespace helper (enforcer/nshelper)
	stage2.Init()          // returns only when not started by klock
	fmt.Fprintln(os.Stderr, "klock-stage2 is klock's session launcher (klock and klockd run it); it is not meant to be run by hand")
	os.Exit(2)
}
