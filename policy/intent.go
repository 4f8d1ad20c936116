package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Predicate is a KLIS predicate.
type Predicate uint8

const (
	Provides Predicate = iota
	Consumes
	Mutates
	Deletes
	DependsOn
	Renames
	numPredicates
)

var predicateNames = [numPredicates]string{"PROVIDES", "CONSUMES", "MUTATES", "DELETES", "DEPENDS_ON", "RENAMES"}

// Predicates lists every predicate in KLIS matrix order.
func Predicates() []Predicate {
	return []Predicate{Provides, Consumes, Mutates, Deletes, DependsOn, Renames}
}

func (p Predicate) String() string {
	if p < numPredicates {
		return predicateNames[p]
	}
	return fmt.Sprintf("Predicate(%d)", p)
}

// MarshalText renders the predicate name.
func (p Predicate) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// ParsePredicate reads a predicate name (case-sensitive, as KLIS writes them).
func ParsePredicate(s string) (Predicate, error) {
	for i, n := range predicateNames {
		if s == n {
			return Predicate(i), nil
		}
	}
	return 0, fmt.Errorf("unknown predicate %q; want one of %s%s", s, strings.Join(predicateNames[:], " "), didYouMean(strings.ToUpper(s), predicateNames[:]))
}

// ObjectType is the resource type of an intent's object.
type ObjectType uint8

const (
	ObjFile ObjectType = iota + 1
	ObjNet
	ObjProc
)

func (t ObjectType) String() string {
	switch t {
	case ObjFile:
		return "FILE"
	case ObjNet:
		return "NET"
	case ObjProc:
		return "PROC"
	}
	return "?"
}

// Object is the object of an intent: a path pattern (FILE, PROC) or a
// network pattern (NET).
type Object struct {
	Type ObjectType
	Path PathPattern // FILE and PROC
	Net  NetPattern  // NET
}

func (o Object) String() string {
	switch o.Type {
	case ObjNet:
		return "NET:" + o.Net.String()
	case ObjFile, ObjProc:
		return o.Type.String() + ":" + o.Path.String()
	}
	return "?"
}

// Intent is one declared triple; the subject is the manifest's agent.
type Intent struct {
	Predicate Predicate
	Object    Object
	// Subject, when written, must equal agent.id (KLIS triples are SPO).
	Subject    string
	Confidence string // High | Medium | Low (KLIS); informational
	Reason     string // why the agent needs it; informational
	// Origin says where the intent came from: "manifest", "baseline:system-ro",
	// or "lease" for a permissive-mode amendment.
	Origin string
	// raw is the object as written, before ${workdir} expansion.
	raw string
}

func (i Intent) String() string { return i.Predicate.String() + " " + i.Object.String() }

// MarshalText renders the intent in its string form.
func (i Intent) MarshalText() ([]byte, error) { return []byte(i.String()), nil }

// ParseIntent reads the string form "PREDICATE TYPE:object".
// ${workdir} is left unexpanded; Parse expands it against the manifest.
func ParseIntent(s string) (Intent, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return Intent{}, fmt.Errorf("intent %q: want \"PREDICATE TYPE:object\", e.g. \"MUTATES FILE:/srv/repo/src/**\"", s)
	}
	p, err := ParsePredicate(f[0])
	if err != nil {
		return Intent{}, err
	}
	o, err := ParseObject(f[1])
	if err != nil {
		return Intent{}, err
	}
	return Intent{Predicate: p, Object: o, Origin: "manifest", raw: f[1]}, nil
}

// ParseObject reads "FILE:/path", "NET:host:port" or "PROC:/path".
func ParseObject(s string) (Object, error) {
	typ, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Object{}, fmt.Errorf("object %q has no type; want FILE:/path, NET:host:port or PROC:/path", s)
	}
	switch typ {
	case "FILE", "PROC":
		t := ObjFile
		if typ == "PROC" {
			t = ObjProc
		}
		p, err := ParsePathPattern(rest)
		if err != nil {
			return Object{}, fmt.Errorf("%s:%s: %w", typ, rest, err)
		}
		return Object{Type: t, Path: p}, nil
	case "NET":
		n, err := ParseNetPattern(rest)
		if err != nil {
			return Object{}, fmt.Errorf("NET:%s: %w", rest, err)
		}
		return Object{Type: ObjNet, Net: n}, nil
	}
	return Object{}, fmt.Errorf("object type %q is not one klock enforces; want FILE, NET or PROC%s", typ, didYouMean(strings.ToUpper(typ), []string{"FILE", "NET", "PROC"}))
}

// intentMap is the map form of an intent.
type intentMap struct {
	Predicate  string `yaml:"predicate"`
	Object     string `yaml:"object"`
	Subject    string `yaml:"subject"`
	Confidence string `yaml:"confidence"`
	Reason     string `yaml:"reason"`
}

// decodeNode accepts "PREDICATE TYPE:object" or
// {predicate, object, subject, confidence, reason}.
func (i *Intent) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.ScalarNode:
		in, err := ParseIntent(n.Value)
		if err != nil {
			d.fail(n, path, "intent", "", "%v", err)
			return
		}
		*i = in
	case yaml.MappingNode:
		var m intentMap
		d.decodeStruct(n, reflectElem(&m), path)
		p, err := ParsePredicate(m.Predicate)
		if err != nil {
			d.fail(n, join(path, "predicate"), "intent", "", "%v", err)
			return
		}
		o, err := ParseObject(m.Object)
		if err != nil {
			d.fail(n, join(path, "object"), "intent", "", "%v", err)
			return
		}
		*i = Intent{Predicate: p, Object: o, Subject: m.Subject, Confidence: m.Confidence, Reason: m.Reason, Origin: "manifest", raw: m.Object}
	default:
		d.fail(n, path, "type", "write a string or a map", "want an intent, got %s", kindName(n))
	}
}
