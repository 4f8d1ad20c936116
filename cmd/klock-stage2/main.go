// Command klock-stage2 is stage 2 of every klock session (package
// enforcer/launch/stage2): klock and klockd run it, when it is installed
// beside them, to set a session up and exec the agent. It does what their
// own re-executed binary would, and starts sooner because it is small.
package main

import (
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
)

func main() {
	stage2.Init() // returns only when not started by klock
	fmt.Fprintln(os.Stderr, "klock-stage2 is klock's session launcher (klock and klockd run it); it is not meant to be run by hand")
	os.Exit(2)
}
