package lease

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// Resource is what a lease is on: a FILE path pattern or a NET endpoint.
// It is the object of a leased intent (see FromIntent).
type Resource struct {
	Type policy.ObjectType // policy.ObjFile or policy.ObjNet
	Path policy.PathPattern
	Net  policy.NetPattern
}

// String renders the resource as its KLIS object, "FILE:/repo/src/**".
func (r Resource) String() string {
	if r.Type == policy.ObjFile { // as policy renders it, in one allocation
		switch r.Path.Match {
		case policy.MatchChildren:
			return "FILE:" + strings.TrimSuffix(r.Path.Path, "/") + "/*"
		case policy.MatchSubtree:
			return "FILE:" + strings.TrimSuffix(r.Path.Path, "/") + "/**"
		}
		return "FILE:" + r.Path.Path
	}
	return policy.Object{Type: r.Type, Path: r.Path, Net: r.Net}.String()
}

// ParseResource reads a KLIS object ("FILE:/repo/**", "NET:host:443/tcp").
// A PROC object, or a file under /dev, /proc or /sys, is refused with
// ErrInvalid: nothing leases it (see the package documentation).
func ParseResource(s string) (Resource, error) {
	o, err := policy.ParseObject(s)
	if err != nil {
		return Resource{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	r, ok, why := fromObject(o)
	if !ok {
		return Resource{}, fmt.Errorf("%w: %s is not leased: %s", ErrInvalid, s, why)
	}
	return r, nil
}

// FromIntent is the lease claim an intent makes, or ok=false (and why)
// when the intent leases nothing.
func FromIntent(in policy.Intent) (c Claim, ok bool, why string) {
	r, ok, why := fromObject(in.Object)
	if !ok {
		return Claim{}, false, why
	}
	return Claim{Predicate: in.Predicate, Resource: r, Intent: in.String()}, true, ""
}

// kernelViews are the trees whose files are kernel interfaces, not
// content: they are never leased.
var kernelViews = []string{"/dev", "/proc", "/sys"}

func fromObject(o policy.Object) (Resource, bool, string) {
	switch o.Type {
	case policy.ObjProc:
		return Resource{}, false, "running a program is not owning it"
	case policy.ObjNet:
		if strings.HasPrefix(o.Net.Host, "@") {
			// An abstract unix socket name (NET:@name, as the observer
			// reports it) is per network namespace, and each session has
			// its own.
			return Resource{}, false, "an abstract unix socket name belongs to a network namespace, not the host"
		}
		return Resource{Type: policy.ObjNet, Net: o.Net}, true, ""
	case policy.ObjFile:
		p := o.Path.Path
		for _, k := range kernelViews {
			if p == k || strings.HasPrefix(p, k+"/") {
				return Resource{}, false, k + " holds kernel interfaces, not content a holder owns"
			}
		}
		return Resource{Type: policy.ObjFile, Path: o.Path}, true, ""
	}
	return Resource{}, false, "unknown object type"
}

// Overlap reports whether two resources share anything: a path both
// patterns cover, or an endpoint both name.
func Overlap(a, b Resource) bool {
	if a.Type != b.Type {
		return false
	}
	if a.Type == policy.ObjNet {
		return netOverlap(a.Net, b.Net)
	}
	return PathOverlap(a.Path, b.Path)
}

// PathOverlap reports whether some clean absolute path is covered by both
// patterns.
func PathOverlap(a, b policy.PathPattern) bool {
	if a.Match > b.Match {
		a, b = b, a
	}
	switch {
	case a.Match == policy.MatchExact:
		return b.Covers(a.Path)
	case a.Match == policy.MatchChildren && b.Match == policy.MatchChildren:
		return a.Path == b.Path
	case a.Match == policy.MatchChildren: // b is a subtree
		// b covers a child of a.Path when it covers a.Path's whole tree or
		// is rooted at one of its children.
		return b.Covers(a.Path) || (b.Path != a.Path && path.Dir(b.Path) == a.Path)
	default: // both subtrees
		return a.Covers(b.Path) || b.Covers(a.Path)
	}
}

func netOverlap(a, b policy.NetPattern) bool {
	if a.Raw || b.Raw {
		return a.Raw && b.Raw
	}
	if a.Ports.Hi < b.Ports.Lo || b.Ports.Hi < a.Ports.Lo {
		return false
	}
	if a.Proto != policy.ProtoAny && b.Proto != policy.ProtoAny && a.Proto != b.Proto {
		return false
	}
	switch {
	case a.Host != "" && b.Host != "":
		return strings.EqualFold(strings.TrimSuffix(a.Host, "."), strings.TrimSuffix(b.Host, "."))
	case a.Host != "":
		return wholeFamily(b.Prefix)
	case b.Host != "":
		return wholeFamily(a.Prefix)
	}
	return a.Prefix.Overlaps(b.Prefix)
}

func wholeFamily(p netip.Prefix) bool { return p.IsValid() && p.Bits() == 0 }
