package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/gowebpki/jcs"
	"go.yaml.in/yaml/v3"
)

// A signature covers the whole canonical document, so a failed check alone
// cannot say what changed. Sign therefore also records a short digest of
// each field down to fieldDepth (agent.id, intents[3],
// declared_tools[1].rate_limits); when the signature no longer verifies,
// the current document's digests are compared with them to name the fields
// that differ from what was signed. The digests sit outside the signed
// bytes: forging them can only misdirect that report, never make a changed
// manifest verify.

// fieldDepth is how deep Sign records field digests: deep enough to name a
// tool's contract property, shallow enough to keep the signature small.
const fieldDepth = 3

// fieldDigestBytes truncates each digest: they locate a change, they do not
// authenticate anything.
const fieldDigestBytes = 8

// FieldChange is one field that differs from what was signed.
type FieldChange struct {
	Field string `json:"field"`          // e.g. declared_tools[1].rate_limits
	Kind  string `json:"kind"`           // changed, added, removed
	Pos   Pos    `json:"pos"`            // where it is now (removed: its parent)
	Tool  string `json:"tool,omitempty"` // the declared tool the field belongs to
}

func (c FieldChange) String() string {
	loc := c.Pos.String()
	if loc != "" {
		loc += ": "
	}
	if c.Tool != "" {
		return loc + c.Field + " (tool " + c.Tool + ") " + c.Kind
	}
	return loc + c.Field + " " + c.Kind
}

// fieldDigests returns the digest of every field of root down to
// fieldDepth, keyed by field path.
func fieldDigests(root *yaml.Node) (map[string]string, error) {
	var doc map[string]any
	if err := root.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	delete(doc, "signature")
	out := map[string]string{}
	var walk func(path string, v any, depth int) error
	walk = func(path string, v any, depth int) error {
		if path != "" {
			js, err := json.Marshal(ijson(v))
			if err != nil {
				return err
			}
			c, err := jcs.Transform(js)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(c)
			out[path] = base64.RawURLEncoding.EncodeToString(sum[:fieldDigestBytes])
		}
		if depth == fieldDepth {
			return nil
		}
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				if err := walk(p, e, depth+1); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range x {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), e, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("", ijson(doc), 0); err != nil {
		return nil, fmt.Errorf("%w: field digests: %v", ErrSignature, err)
	}
	return out, nil
}

// ChangedFields compares the manifest with the field digests its signature
// recorded and returns the fields that differ, most specific first (a
// changed tool's rate_limits, not the tool and the list holding it). It
// returns nil when the signature recorded no digests (signed by an older
// klock) or nothing differs at that depth.
func (m *Manifest) ChangedFields() []FieldChange {
	if m.Signature == nil || len(m.Signature.Fields) == 0 {
		return nil
	}
	root, diag := parseDocument(m.File, m.raw)
	if diag != nil {
		return nil
	}
	now, err := fieldDigests(root)
	if err != nil {
		return nil
	}
	signed := m.Signature.Fields
	kind := map[string]string{}
	for p, d := range now {
		switch s, ok := signed[p]; {
		case !ok && withinDepth(p, signed):
			kind[p] = "added"
		case ok && s != d:
			kind[p] = "changed"
		}
	}
	for p := range signed {
		if _, ok := now[p]; !ok {
			kind[p] = "removed"
		}
	}
	// Inside a field added or removed as a whole, nothing more is news.
	for p := range kind {
		if hasAncestorOfKind(p, kind, "added") || hasAncestorOfKind(p, kind, "removed") {
			delete(kind, p)
		}
	}
	var out []FieldChange
	for p, k := range kind {
		if hasChangedChild(p, kind) {
			continue // a deeper field says more
		}
		out = append(out, FieldChange{Field: p, Kind: k, Pos: m.Pos(p), Tool: m.toolOf(p)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pos.Line != out[j].Pos.Line {
			return out[i].Pos.Line < out[j].Pos.Line
		}
		return out[i].Field < out[j].Field
	})
	return out
}

// withinDepth: a path new in the document counts as added only when its
// parent was recorded (so the signer would have recorded it too).
func withinDepth(p string, signed map[string]string) bool {
	parent := parentField(p)
	if parent == "" {
		return true
	}
	_, ok := signed[parent]
	return ok && 1+strings.Count(p, ".")+strings.Count(p, "[") <= fieldDepth
}

func parentField(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func hasChangedChild(p string, kind map[string]string) bool {
	for q := range kind {
		if q != p && (strings.HasPrefix(q, p+".") || strings.HasPrefix(q, p+"[")) {
			return true
		}
	}
	return false
}

func hasAncestorOfKind(p string, kind map[string]string, k string) bool {
	for a := parentField(p); a != ""; a = parentField(a) {
		if kind[a] == k {
			return true
		}
	}
	return false
}

// toolOf names the declared tool a field path is inside, "" for none.
func (m *Manifest) toolOf(p string) string {
	var i int
	if _, err := fmt.Sscanf(p, "declared_tools[%d]", &i); err != nil || i < 0 || i >= len(m.DeclaredTools) {
		return ""
	}
	return m.DeclaredTools[i].Name
}
