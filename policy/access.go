package policy

import "strings"

// Access is a set of predicates: bit i is Predicate i.
type Access uint8

// AccessOf builds a set.
func AccessOf(ps ...Predicate) Access {
	var a Access
	for _, p := range ps {
		a |= 1 << p
	}
	return a
}

// Changing is the predicates whose FILE triples change the file system:
// what the pre-flight backup must cover and a rollback must undo.
var Changing = AccessOf(Mutates, Provides, Deletes, Renames)

// Has reports whether p is in the set.
func (a Access) Has(p Predicate) bool { return a&(1<<p) != 0 }

func (a Access) String() string {
	if a == 0 {
		return "nothing"
	}
	var parts []string
	for _, p := range Predicates() {
		if a.Has(p) {
			parts = append(parts, p.String())
		}
	}
	return strings.Join(parts, "|")
}

// MarshalText renders e.g. "CONSUMES|MUTATES".
func (a Access) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Grants is what declaring p lets the agent do. Modifying or depending on a
// file means reading it, so MUTATES and DEPENDS_ON also grant CONSUMES. No
// other implication holds: creating (PROVIDES) does not grant overwriting an
// existing file, and deleting is never implied.
func Grants(p Predicate) Access {
	switch p {
	case Mutates, DependsOn:
		return AccessOf(p, Consumes)
	}
	return AccessOf(p)
}
