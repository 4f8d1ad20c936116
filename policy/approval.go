package policy

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// KCC: tools with blast_radius organizational need a maintainer's approval
// to run HOTL. A name in a YAML field is something anyone editing the file
// can write; the approval is therefore an ed25519 signature by the
// maintainer over the manifest (canonical JSON without the manifest's own
// signature and without the approval's signature value), so any later
// change to the tools voids it, and launch (policy/trust) checks the key is
// a trusted one.

// ErrApproval: the maintainer approval is missing, unsigned, altered or
// signed by a key that is not trusted.
var ErrApproval = fmt.Errorf("%w: maintainer approval", ErrSignature)

// NeedsMaintainerApproval lists the tools that make a maintainer approval
// necessary: organizational blast radius in an agent that runs HOTL.
func (m *Manifest) NeedsMaintainerApproval() []string {
	if mode, _ := m.EffectiveHITL(); mode != HITLModeHOTL {
		return nil
	}
	var out []string
	for _, t := range m.DeclaredTools {
		if t.BlastRadius == "organizational" {
			out = append(out, t.Name)
		}
	}
	return out
}

// ApprovalKey verifies the maintainer approval's signature and returns the
// key that made it; whether that key is trusted is the caller's question.
func (m *Manifest) ApprovalKey() (ed25519.PublicKey, error) {
	a := m.HITL.MaintainerApproval
	switch {
	case a == nil:
		return nil, fmt.Errorf("%w: none (a maintainer signs one: klock sign --maintainer NAME -k KEY %s)", ErrApproval, m.File)
	case a.Signature == "" || a.PublicKey == "":
		return nil, fmt.Errorf("%w: approved_by %q is free text, not a signature (the maintainer signs it: klock sign --maintainer %q -k KEY %s)", ErrApproval, a.ApprovedBy, a.ApprovedBy, m.File)
	}
	pub, err := ParsePublicKey([]byte(a.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrApproval, err)
	}
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: signature is not a base64 ed25519 signature", ErrApproval)
	}
	root, diag := parseDocument(m.File, m.raw)
	if diag != nil {
		return nil, fmt.Errorf("%w: %s", ErrApproval, diag)
	}
	msg, err := approvalBytes(root)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return nil, fmt.Errorf("%w: by %s (key %s) no longer verifies: the manifest changed since the maintainer signed it; have it approved again", ErrApproval, a.ApprovedBy, a.PublicKey)
	}
	return pub, nil
}

// approvalBytes is what a maintainer signs: the canonical document without
// the manifest's signature and without the approval's own signature value.
func approvalBytes(root *yaml.Node) ([]byte, error) {
	cp := cloneNode(root)
	if a := mapChild(mapChild(cp, "hitl"), "maintainer_approval"); a != nil {
		deleteKey(a, "signature")
	}
	return canonical(cp)
}

// SignApproval writes hitl.maintainer_approval as the maintainer's
// signature (approved_by, reference, public_key, signature) into the
// manifest and drops the manifest's own signature, which no longer covers
// it: the manifest is then signed again (klock sign).
func SignApproval(data []byte, priv ed25519.PrivateKey, approvedBy, reference string) ([]byte, error) {
	root, diag := parseDocument("manifest", data)
	if diag != nil {
		return nil, fmt.Errorf("%w: %s", ErrSignature, diag)
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: manifest is not a map", ErrSignature)
	}
	deleteKey(root, "signature")
	hitl := mapChild(root, "hitl")
	if hitl == nil {
		hitl = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "hitl"}, hitl)
	}
	deleteKey(hitl, "maintainer_approval")
	a := Approval{ApprovedBy: approvedBy, Reference: reference, PublicKey: FormatPublicKey(priv.Public().(ed25519.PublicKey))}
	var an yaml.Node
	if err := an.Encode(map[string]string{"approved_by": a.ApprovedBy, "reference": a.Reference, "public_key": a.PublicKey}); err != nil {
		return nil, err
	}
	if a.Reference == "" {
		deleteKey(&an, "reference")
	}
	hitl.Content = append(hitl.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "maintainer_approval"}, &an)
	msg, err := approvalBytes(root)
	if err != nil {
		return nil, err
	}
	an.Content = append(an.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "signature"},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))})
	return encodeLike(data, root)
}

func mapChild(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func deleteKey(n *yaml.Node, key string) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i:i], n.Content[i+2:]...)
			return
		}
	}
}

func cloneNode(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = cloneNode(k)
	}
	return &c
}

// encodeLike renders root as data was: JSON stays JSON, YAML stays YAML
// (comments kept).
func encodeLike(data []byte, root *yaml.Node) ([]byte, error) {
	if isJSON(data) {
		var doc map[string]any
		if err := root.Decode(&doc); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSignature, err)
		}
		out, err := json.MarshalIndent(ijson(doc), "", "  ")
		return append(out, '\n'), err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
