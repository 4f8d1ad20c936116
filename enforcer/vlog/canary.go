package vlog

import "fmt"

// Canary is one operation the session tried under its walls before the
// agent's exec (a write, an exec, a connect no declared scope covers):
// what the wall that must refuse it did. A wall is trusted only once it
// has refused its canary on this kernel, in this session.
type Canary struct {
	Kind   string `json:"kind"`   // write, exec or connect
	Target string `json:"target"` // the path or address tried
	Wall   string `json:"wall"`   // the wall that must refuse it (landlock, bpf-lsm, cgroup-net)
	// Refused: the wall refused it (Errno says how). False with Skipped
	// empty: the wall let it through and does not enforce.
	Refused bool   `json:"refused"`
	Errno   string `json:"errno,omitempty"`
	// Skipped says why it was not tried (the declared scope allows it).
	Skipped string `json:"skipped,omitempty"`
}

// NotEnforcing reports whether the canary's wall let it through.
func (c Canary) NotEnforcing() bool { return !c.Refused && c.Skipped == "" }

func (c Canary) String() string {
	switch {
	case c.Skipped != "":
		return fmt.Sprintf("%s %s: skipped (%s)", c.Kind, c.Target, c.Skipped)
	case c.Refused:
		return fmt.Sprintf("%s %s: refused by %s (%s)", c.Kind, c.Target, c.Wall, c.Errno)
	}
	return fmt.Sprintf("%s %s: NOT refused: %s is not enforcing", c.Kind, c.Target, c.Wall)
}

// NotEnforcing names the walls of cs that let their canary through, as
// "landlock (write)".
func NotEnforcing(cs []Canary) []string {
	var walls []string
	for _, c := range cs {
		if c.NotEnforcing() {
			walls = append(walls, c.Wall+" ("+c.Kind+")")
		}
	}
	return walls
}
