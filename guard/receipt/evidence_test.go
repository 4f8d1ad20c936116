package receipt

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestDecisionMustAgreeWithItsEvidence: a receipt signed by the right key
// still fails verification when its decision contradicts its evidence; a
// refusal's informational facts (cost-source) do not count as a refusal,
// and receipts without evidence (older chains) pass.
func TestDecisionMustAgreeWithItsEvidence(t *testing.T) {
	ev := func(specs ...string) []Evidence {
		var out []Evidence
		for _, s := range specs {
			out = append(out, Evidence{GuardName: strings.TrimRight(s, "+-"), Verdict: strings.HasSuffix(s, "+")})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		decision Decision
		evidence []Evidence
		bad      bool
	}{
		{"allow, all passed", Decision{Verdict: Allow}, ev("schema+", "budget+", "cost-source-"), false},
		{"no evidence", Decision{Verdict: Deny, Guard: "budget"}, nil, false},
		{"deny by its refusing guard", Decision{Verdict: Deny, Guard: "rate"}, ev("schema+", "rate-"), false},
		{"allow with a refusal", Decision{Verdict: Allow}, ev("schema+", "rate-"), true},
		{"deny without a refusal", Decision{Verdict: Deny, Guard: "rate"}, ev("schema+", "cost-source-"), true},
		{"deny by a guard that passed", Decision{Verdict: Deny, Guard: "schema"}, ev("schema+", "rate-"), true},
	} {
		_, priv := newKey(t)
		path := filepath.Join(t.TempDir(), "receipts.jsonl")
		l, err := OpenLog(path, priv, WithoutSync())
		if err != nil {
			t.Fatal(err)
		}
		r := sample(1)
		r.Decision, r.Evidence = tc.decision, tc.evidence
		if _, err := l.Append(r); err != nil {
			t.Fatal(err)
		}
		l.Close()
		_, err = VerifyFile(path, nil, nil)
		if got := err != nil; got != tc.bad || tc.bad && !strings.Contains(err.Error(), ErrEvidence.Error()) {
			t.Errorf("%s: verify: %v", tc.name, err)
		}
		if err := CheckEvidence(r); (err != nil) != tc.bad || tc.bad && !errors.Is(err, ErrEvidence) {
			t.Errorf("%s: CheckEvidence: %v", tc.name, err)
		}
	}
}
