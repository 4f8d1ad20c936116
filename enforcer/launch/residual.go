package launch

import "fmt"

// ResidualKind says how the Landlock wall differs from the declared scope.
type ResidualKind string

const (
	// Widened: the wall allows more than was declared (the nearest
	// expressible scope is wider). Detection must flag the excess.
	Widened ResidualKind = "widened"
	// Narrowed: the wall denies something that was declared; the agent
	// gets EACCES for it.
	Narrowed ResidualKind = "narrowed"
	// Unmediated: Landlock does not see this kind of operation at all (at
	// this ABI); only detection (or another backend) covers it.
	Unmediated ResidualKind = "unmediated"
)

// Residual is one difference between the declared scope and the Landlock
// wall actually built. The list is the contract with the detection side:
// everything in it must be covered by the tracepoint backend (and
// cgroup-net for the network), since the kernel will not block it.
type Residual struct {
	Kind ResidualKind `json:"kind"`
	// Object is the declared object ("FILE:/srv/repo/build/**",
	// "NET:api.example.com:443"), empty for a global difference.
	Object string `json:"object,omitempty"`
	// Wall is where the rule was placed instead (empty when nothing was).
	Wall string `json:"wall,omitempty"`
	// Rights are the Landlock rights involved.
	Rights FSRights `json:"rights,omitempty"`
	Reason string   `json:"reason"`
	// Intents are indexes into Ruleset.Intents (empty for globals).
	Intents []int `json:"intents,omitempty"`
}

func (r Residual) String() string {
	s := string(r.Kind) + ": "
	if r.Object != "" {
		s += r.Object + ": "
	}
	s += r.Reason
	if r.Wall != "" {
		s += fmt.Sprintf(" [wall: %s %s]", r.Wall, r.Rights)
	}
	return s
}
