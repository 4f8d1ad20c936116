package lsm

import (
	"fmt"
	"sort"
	"strings"

	"github.com/klocklabs/klock/internal/brokenwall"
	"github.com/klocklabs/klock/policy"
)

// Access bits of the kernel rules: bit i is policy.Predicate i (as
// policy.Access), plus exec (PROVIDES PROC:).
const (
	accExec    = 1 << 6
	accMapExec = 1 << 7 // LSM_MAPEXEC: a baseline library directory (executable mappings only)
	keyPathMax = 248    // LSM_KEY_PATH
	kindExact  = 0
	kindPrefix = 1
)

// entry is one LPM trie entry: key is the path bytes (a directory with its
// trailing '/' for a prefix, a path and its NUL for an exact entry); direct
// and deeper are the union of what every covering rule grants (see
// bpf/include/lsm.h).
type entry struct {
	key            string
	kind           uint8
	direct, deeper uint8
}

// grantRule is one FILE or PROC rule as access bits.
type grantRule struct {
	pat  policy.PathPattern
	bits uint8
}

// compile turns a ruleset into the kernel's entries. Every rule must fit an
// LPM key; the union per entry makes the kernel's longest match decide
// exactly as policy.Ruleset.Allows (TestCompileAgreesWithAllows).
func compile(rs *policy.Ruleset) ([]entry, error) {
	var rules []grantRule
	for _, r := range rs.Files {
		rules = append(rules, grantRule{r.Pattern, uint8(r.Grants)})
	}
	for _, r := range rs.Exec {
		rules = append(rules, grantRule{r.Pattern, accExec})
	}
	for _, p := range rs.Libraries {
		rules = append(rules, grantRule{p, accMapExec})
	}
	if brokenwall.On {
		// The test build whose wall grants everything (the canaries
		// must catch it).
		rules = append(rules, grantRule{policy.PathPattern{Path: "/", Match: policy.MatchSubtree}, 0xff &^ accMapExec})
	}
	exact := map[string]bool{}
	prefix := map[string]bool{}
	for _, r := range rules {
		p := r.pat.Path
		if len(p)+1 > keyPathMax {
			return nil, &TooLongError{Pattern: r.pat.String(), Limit: keyPathMax - 1}
		}
		exact[p] = true
		if r.pat.Match != policy.MatchExact {
			prefix[dirKey(p)] = true
		}
	}
	covers := func(q string) (bits uint8) {
		for _, r := range rules {
			if r.pat.Covers(q) {
				bits |= r.bits
			}
		}
		// A library directory where the agent may put its own bytes
		// maps nothing executable (policy.Ruleset.MapsExec).
		if bits&uint8(policy.Writable) != 0 {
			bits &^= accMapExec
		}
		return bits
	}
	var out []entry
	for p := range exact {
		b := covers(p)
		out = append(out, entry{key: p + "\x00", kind: kindExact, direct: b, deeper: b})
	}
	for k := range prefix {
		// A name no rule can spell (paths never hold NUL) stands for
		// "any name here" and "anything below".
		out = append(out, entry{key: k, kind: kindPrefix, direct: covers(k + "\x00"), deeper: covers(k + "\x00/\x00")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

func dirKey(p string) string {
	if p == "/" {
		return "/"
	}
	return p + "/"
}

// lookup is the kernel's decision, in Go: the longest entry that is a
// prefix of the path (with its NUL, cut to keyPathMax bytes), then direct
// or deeper by where the path's last '/' is. Used by the tests and by
// Explain-style tooling; the kernel never calls it.
func lookup(entries []entry, q string) uint8 {
	k := q + "\x00"
	if len(k) > keyPathMax {
		k = k[:keyPathMax]
	}
	best := -1
	for i, e := range entries {
		if strings.HasPrefix(k, e.key) && (best < 0 || len(e.key) > len(entries[best].key)) {
			best = i
		}
	}
	if best < 0 {
		return 0
	}
	e := entries[best]
	if e.kind == kindExact || len(e.key) == strings.LastIndexByte(q, '/')+1 {
		return e.direct
	}
	return e.deeper
}

// TooLongError: a rule's path does not fit the kernel's LPM key.
type TooLongError struct {
	Pattern string
	Limit   int
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("lsm: rule %s is longer than the %d bytes a BPF-LSM rule can hold; use a shorter path (a parent directory with /**), or --backend landlock", e.Pattern, e.Limit)
}

func (e *TooLongError) Unwrap() error { return ErrUnsupported }
