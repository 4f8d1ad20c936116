package policy

// conflictMatrix is KLIS-2's 6x6 matrix, rows the held predicate, columns
// the incoming one, in Predicates() order (PROVIDES CONSUMES MUTATES DELETES
// DEPENDS_ON RENAMES). true means the two cannot be held together.
var conflictMatrix = [numPredicates][numPredicates]bool{
	Provides:  {true, false, true, true, false, true},
	Consumes:  {false, false, true, true, false, true},
	Mutates:   {true, true, true, true, true, true},
	Deletes:   {true, true, true, true, true, true},
	DependsOn: {false, false, true, true, false, true},
	Renames:   {true, true, true, true, true, true},
}

// Conflicts reports whether an incoming predicate conflicts with a held one
// on the same resource, by the KLIS-2 matrix.
func Conflicts(held, incoming Predicate) bool {
	if held >= numPredicates || incoming >= numPredicates {
		return true
	}
	return conflictMatrix[held][incoming]
}

// Holder identifies who holds or requests a lease.
type Holder struct{ Agent, Session string }

// LeaseConflicts applies the matrix to two holders: the same agent in the
// same session never conflicts with itself (leases are re-entrant).
func LeaseConflicts(held Holder, heldP Predicate, incoming Holder, inP Predicate) bool {
	if held == incoming {
		return false
	}
	return Conflicts(heldP, inP)
}
