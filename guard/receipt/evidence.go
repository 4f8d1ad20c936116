package receipt

import (
	"errors"
	"fmt"
)

// ErrEvidence: a receipt's decision contradicts its evidence (an allow
// with a guard's deny verdict, a deny with none, a deny whose deciding
// guard's evidence says it passed). The evidence is covered by the
// signature like every field; this checks what it says.
var ErrEvidence = errors.New("decision inconsistent with its evidence")

// Informational evidence records a fact, not a guard's verdict: its
// verdict false (a cost not reported, a cost_per_invocation already
// within the reservation) does not contradict an allow.
var informational = map[string]bool{"cost-source": true, "exchange-rate": true, "cost-per-invocation": true}

// CheckEvidence holds r's decision to its evidence. A receipt without
// evidence (written before guards recorded theirs) passes.
func CheckEvidence(r *Receipt) error {
	if len(r.Evidence) == 0 {
		return nil
	}
	var refused []string
	for _, e := range r.Evidence {
		if !e.Verdict && !informational[e.GuardName] {
			refused = append(refused, e.GuardName)
		}
		if r.Decision.Verdict == Deny && e.GuardName == r.Decision.Guard && e.Verdict {
			return fmt.Errorf("%w: receipt %d denies by guard %s, whose evidence says it passed", ErrEvidence, r.Seq, e.GuardName)
		}
	}
	switch {
	case r.Decision.Verdict == Allow && len(refused) > 0:
		return fmt.Errorf("%w: receipt %d allows, but guard(s) %v refused", ErrEvidence, r.Seq, refused)
	case r.Decision.Verdict == Deny && len(refused) == 0:
		return fmt.Errorf("%w: receipt %d denies, but no guard's evidence refused", ErrEvidence, r.Seq)
	}
	return nil
}
