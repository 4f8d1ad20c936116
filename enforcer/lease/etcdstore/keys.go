package etcdstore

import (
	"path"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

// The lease keys are laid out by what they lease (see the package doc):
//
//	P/lease/f<anchor>\x00<id>   a FILE lease; anchor is its pattern's path
//	P/lease/n\x00<id>           a NET lease
//
// A NUL never occurs in a path, so the keys of one anchor are exactly the
// prefix P/lease/f<anchor>\x00 and those of the anchors below it exactly
// P/lease/f<anchor>/ (for the root, P/lease/f/ holds every FILE lease).

const (
	fileTag = "f"
	netTag  = "n"
	sep     = "\x00"
)

// keyOf is the etcd key of lease id on r.
func (s *Store) keyOf(r lease.Resource, id string) string {
	if r.Type == policy.ObjNet {
		return s.leasePrefix() + netTag + sep + id
	}
	return s.leasePrefix() + fileTag + anchor(r) + sep + id
}

// anchor is the directory or file a FILE pattern is rooted at.
func anchor(r lease.Resource) string {
	p := path.Clean("/" + r.Path.Path)
	return p
}

// conflictRanges are the key prefixes that hold every lease that can
// overlap one of claims: for a FILE pattern anchored at A, the leases
// anchored at A, at each ancestor of A, and anywhere below A (two FILE
// patterns overlap only when one's anchor is an ancestor of, or equal to,
// the other's: lease.PathOverlap); for NET, every NET lease. A claim on a
// path of depth d so reads d+2 ranges, however many leases the fleet holds
// elsewhere.
func (s *Store) conflictRanges(claims []lease.Claim) []string {
	var out []string
	for _, c := range claims {
		if c.Resource.Type == policy.ObjNet {
			out = append(out, s.leasePrefix()+netTag+sep)
			continue
		}
		a := anchor(c.Resource)
		f := s.leasePrefix() + fileTag
		if a == "/" {
			out = append(out, f+"/")
			continue
		}
		out = append(out, f+a+sep, f+a+"/")
		for x := path.Dir(a); ; x = path.Dir(x) {
			out = append(out, f+x+sep)
			if x == "/" {
				break
			}
		}
	}
	slices.Sort(out)
	return dropCovered(slices.Compact(out))
}

// dropCovered removes the prefixes another prefix of the sorted list
// already covers.
func dropCovered(sorted []string) []string {
	out := sorted[:0]
	for _, p := range sorted {
		if n := len(out); n > 0 && strings.HasPrefix(p, out[n-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// rangeFence holds while no key under any of the prefixes changed after
// rev: the revision fence of a grant decided on a read at rev.
func rangeFence(prefixes []string, rev int64) []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, len(prefixes))
	for i, p := range prefixes {
		cmps[i] = clientv3.Compare(clientv3.ModRevision(p), "<", rev+1).WithPrefix()
	}
	return cmps
}
