package policy

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Triple is an observed operation: the subject is the session's agent.
type Triple struct {
	Predicate Predicate
	Type      ObjectType
	Path      string         // FILE and PROC: clean absolute, kernel-resolved
	Addr      netip.AddrPort // NET by address
	Host      string         // NET by name (before resolution)
	Proto     Proto          // NET
	Raw       bool           // NET: raw or packet socket
}

// FileTriple is "predicate FILE:path".
func FileTriple(p Predicate, path string) Triple {
	return Triple{Predicate: p, Type: ObjFile, Path: path}
}

// ExecTriple is "PROVIDES PROC:path".
func ExecTriple(path string) Triple { return Triple{Predicate: Provides, Type: ObjProc, Path: path} }

// NetTriple is "predicate NET:addr:port".
func NetTriple(p Predicate, addr netip.AddrPort, proto Proto) Triple {
	return Triple{Predicate: p, Type: ObjNet, Addr: addr, Proto: proto}
}

// RawSocketTriple is "CONSUMES NET:raw".
func RawSocketTriple() Triple { return Triple{Predicate: Consumes, Type: ObjNet, Raw: true} }

func (t Triple) String() string { return t.Predicate.String() + " " + t.ObjectString() }

// ObjectString renders the object, e.g. FILE:/etc/hosts or NET:10.0.0.1:443/tcp.
func (t Triple) ObjectString() string {
	switch t.Type {
	case ObjFile, ObjProc:
		return t.Type.String() + ":" + t.Path
	case ObjNet:
		var s string
		switch {
		case t.Raw:
			return "NET:raw"
		case t.Host != "":
			s = t.Host + ":" + strconv.Itoa(int(t.Addr.Port()))
		case t.Addr.Addr().Is6() && !t.Addr.Addr().Is4In6():
			s = "[" + t.Addr.Addr().String() + "]:" + strconv.Itoa(int(t.Addr.Port()))
		default:
			s = t.Addr.Addr().Unmap().String() + ":" + strconv.Itoa(int(t.Addr.Port()))
		}
		if t.Proto != ProtoAny {
			s += "/" + t.Proto.String()
		}
		return "NET:" + s
	}
	return "?"
}

// Decision answers Allows.
type Decision struct {
	Allowed bool
	// Intent is the most specific intent that allows the triple (nil when denied).
	Intent *Intent
	// Declared is every predicate declared on the object by any covering
	// rule, with implications: what the agent *could* do there.
	Declared Access
}

// Allows decides an observed triple against the ruleset.
func (rs *Ruleset) Allows(t Triple) Decision {
	switch t.Type {
	case ObjFile:
		best, declared := rs.files.lookup(t.Path, t.Predicate)
		return rs.decision(best, declared)
	case ObjProc:
		if t.Predicate != Provides {
			return Decision{}
		}
		best, _ := rs.exec.lookup(t.Path, Provides)
		var declared Access
		if best != 0 {
			declared = AccessOf(Provides)
		}
		return rs.decision(best, declared)
	case ObjNet:
		return rs.allowsNet(t)
	}
	return Decision{}
}

// AllowsBelow is Allows for predicate p on every FILE path below dir, at
// any depth, when it is the same for all of them (same answer, same
// intent): same is false when some rule names a path below dir, where
// paths may be judged otherwise. dir is clean and absolute.
func (rs *Ruleset) AllowsBelow(p Predicate, dir string) (d Decision, same bool) {
	best, declared, same := rs.files.lookupBelow(dir, p)
	if !same {
		return Decision{}, false
	}
	return rs.decision(best, declared), true
}

// AllowsAllBelow says whether p is allowed on every FILE path below dir:
// an intent on dir's subtree, or on one above it. Intents only allow, so
// rules on paths below dir can add to that but never take from it. dir is
// clean and absolute.
func (rs *Ruleset) AllowsAllBelow(p Predicate, dir string) bool {
	best, _, _ := rs.files.lookupBelow(dir, p)
	return best != 0
}

func (rs *Ruleset) decision(best int32, declared Access) Decision {
	if best == 0 {
		return Decision{Declared: expand(declared)}
	}
	return Decision{Allowed: true, Intent: &rs.Intents[best-1], Declared: expand(declared)}
}

func expand(a Access) Access {
	out := a
	for _, p := range Predicates() {
		if a.Has(p) {
			out |= Grants(p)
		}
	}
	return out
}

func (rs *Ruleset) allowsNet(t Triple) Decision {
	var d Decision
	if t.Raw {
		for _, i := range rs.netIdx.raw {
			d.Declared |= rs.Net[i].Access
			if !d.Allowed {
				d.Allowed, d.Intent = true, &rs.Intents[rs.Net[i].Intent]
			}
		}
		return d
	}
	port := t.Addr.Port()
	rs.matchNet(&d, t, rs.netIdx.byPort[port])
	rs.matchNet(&d, t, rs.netIdx.wide)
	return d
}

func (rs *Ruleset) matchNet(d *Decision, t Triple, candidates []int32) {
	addr := t.Addr.Addr().Unmap()
	port := t.Addr.Port()
	for _, i := range candidates {
		r := &rs.Net[i]
		p := &r.Pattern
		var match bool
		if t.Host != "" {
			match = p.Matches(t.Host) && p.Ports.Contains(port)
		} else {
			match = p.Host == "" && p.Ports.Contains(port) && p.Prefix.Contains(addr)
		}
		if !match || (p.Proto != ProtoAny && t.Proto != ProtoAny && p.Proto != t.Proto) {
			continue
		}
		d.Declared |= r.Access
		if !d.Allowed && r.Access.Has(t.Predicate) {
			d.Allowed, d.Intent = true, &rs.Intents[r.Intent]
		}
	}
}

// ScopeViolationError is KLIS-6 §3.1's error for an operation outside the
// declared scope.
type ScopeViolationError struct {
	Triple   Triple
	Declared Access
	// Via is the other name the operation reached the object through (a
	// hard link or rename that would give the file's inode rights none of
	// its names had): "through the hard link /w/out/s". Empty otherwise.
	Via string
}

func (e *ScopeViolationError) Error() string {
	obj := e.Triple.Path
	if e.Triple.Type == ObjNet {
		obj = e.Triple.ObjectString()
	}
	if e.Via != "" {
		obj += " (" + e.Via + ")"
	}
	if e.Declared == 0 {
		return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but declared nothing there", e.Triple.Predicate, obj)
	}
	return fmt.Sprintf("ScopeViolationError: Agent attempted %s on %s but only declared %s", e.Triple.Predicate, obj, e.Declared)
}

// Needed is the intent that would have allowed the operation.
func (e *ScopeViolationError) Needed() string { return e.Triple.String() }

// Violation returns the ScopeViolationError for a denied decision, nil when
// the decision allows.
func (d Decision) Violation(t Triple) *ScopeViolationError {
	if d.Allowed {
		return nil
	}
	return &ScopeViolationError{Triple: t, Declared: d.Declared}
}
