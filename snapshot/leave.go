package snapshot

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// Region is a part of the file system Restore leaves as it finds it (see
// Leave): what another holder's lease lets it change. Pattern is an exact
// path, "/dir/*" (its entries) or "/dir/**" (it and everything below),
// with policy.PathPattern's meaning; Why says whose it is, for the report.
type Region struct {
	Pattern policy.PathPattern
	Why     string
}

type regionJSON struct {
	Pattern string `json:"pattern"`
	Why     string `json:"why,omitempty"`
}

// MarshalJSON writes the pattern as the manifest writes it.
func (r Region) MarshalJSON() ([]byte, error) {
	return json.Marshal(regionJSON{Pattern: r.Pattern.String(), Why: r.Why})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Region) UnmarshalJSON(b []byte) error {
	var j regionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	p, err := policy.ParsePathPattern(j.Pattern)
	if err != nil {
		return fmt.Errorf("%w: region %q: %v", ErrInvalid, j.Pattern, err)
	}
	r.Pattern, r.Why = p, j.Why
	return nil
}

// Leave makes Restore leave every path one of regions covers as it finds
// it: neither put back, nor removed, nor its metadata (a directory's times
// included) touched. Each such path that differs from the backup (changed,
// missing or new since Take) is reported Left with its region's Why; a new
// directory is reported alone, and a new directory that holds a region
// below it is kept (Left) while what else is new in it is judged on its
// own. A resumed restore keeps the regions of the interrupted one, unless
// it is All (All keeps the regions given to it).
//
// A session passes the regions other sessions' changing leases (MUTATES,
// DELETES, RENAMES, PROVIDES) held while it ran: the lease manager
// guarantees its agent had no right there, and what is there is the other
// session's work, which a rollback must not undo. Leave applies within
// Only's roots, and to ChangedSince.
func Leave(regions ...Region) RestoreOption {
	return func(l *limit) {
		for _, r := range regions {
			r.Pattern.Path = cleanPattern(r.Pattern.Path)
			l.leave = append(l.leave, r)
		}
	}
}

func cleanPattern(p string) string {
	if p == "" {
		return "/"
	}
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// left returns the region that covers p (clean, absolute), if any.
func (l *limit) left(p string) (Region, bool) {
	for _, r := range l.leave {
		if r.Pattern.Covers(p) {
			return r, true
		}
	}
	return Region{}, false
}

// holdsLeft returns a region some path strictly below directory p lies
// in, if any: a new directory p cannot be removed whole without removing
// what the region leaves.
func (l *limit) holdsLeft(p string) (Region, bool) {
	for _, r := range l.leave {
		rp := r.Pattern.Path
		if r.Pattern.Match == policy.MatchChildren && rp == p {
			return r, true
		}
		if rp != p && (p == "/" || strings.HasPrefix(rp, p+"/")) {
			return r, true
		}
	}
	return Region{}, false
}

// othersWhy is the reason Restore gives for leaving a path of m.Others
// that no Leave region covers.
const othersWhy = "another session's tree when this session began"

// othersRegions are m.Others as regions Restore leaves: another session's
// trees, whatever regions the caller passes (Reclaim names the exceptions).
func othersRegions(m *Manifest) []Region {
	var out []Region
	for _, o := range m.Others {
		out = append(out, Region{Pattern: policy.PathPattern{Path: cleanPattern(o), Match: policy.MatchSubtree}, Why: othersWhy})
	}
	return out
}
