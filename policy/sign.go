package policy

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"strings"

	"github.com/gowebpki/jcs"
	"go.yaml.in/yaml/v3"
)

// The signed bytes are the RFC 8785 (JCS) canonical JSON of the manifest
// document without its top-level "signature" field. Signing the canonical
// form rather than the file means a YAML manifest and its JSON rendering
// carry the same signature, and reformatting does not break it. Integers
// that JSON cannot carry exactly (beyond ±2^53, I-JSON) are canonicalized
// as decimal strings so two documents differing only there never share a
// signature.

const keyPrefix = "ed25519:"

// CanonicalBytes returns the bytes a manifest signature covers.
func CanonicalBytes(data []byte) ([]byte, error) {
	root, diag := parseDocument("manifest", data)
	if diag != nil {
		return nil, fmt.Errorf("%w: %s", ErrSignature, diag)
	}
	return canonical(root)
}

func canonical(root *yaml.Node) ([]byte, error) {
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: manifest is not a map", ErrSignature)
	}
	var doc map[string]any
	if err := root.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	delete(doc, "signature")
	js, err := json.Marshal(ijson(doc))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	out, err := jcs.Transform(js)
	if err != nil {
		return nil, fmt.Errorf("%w: canonicalize: %v", ErrSignature, err)
	}
	return out, nil
}

// ijson makes a decoded YAML value I-JSON: string keys, exact numbers.
func ijson(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = ijson(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = ijson(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = ijson(e)
		}
		return x
	case int:
		if x > 1<<53 || x < -(1<<53) {
			return fmt.Sprint(x)
		}
	case uint64:
		if x > 1<<53 {
			return fmt.Sprint(x)
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
	}
	return v
}

// GenerateKey returns a new ed25519 key pair as PEM (PKCS#8 private key,
// PKIX public key).
func GenerateKey() (privPEM, pubPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	px, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: px}), nil
}

// ParsePrivateKey reads a PEM PKCS#8 ed25519 private key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: not a PEM \"PRIVATE KEY\" (make one with klock keygen)", ErrSignature)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, want ed25519", ErrSignature, k)
	}
	return priv, nil
}

// ParsePublicKey reads a PEM PKIX ed25519 public key or "ed25519:<base64>".
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	s := strings.TrimSpace(string(data))
	if rest, ok := strings.CutPrefix(s, keyPrefix); ok {
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: malformed public key %q", ErrSignature, s)
		}
		return ed25519.PublicKey(raw), nil
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w: not a PEM \"PUBLIC KEY\" or ed25519:<base64>", ErrSignature)
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, want ed25519", ErrSignature, k)
	}
	return pub, nil
}

// FormatPublicKey renders "ed25519:<base64>".
func FormatPublicKey(pub ed25519.PublicKey) string {
	return keyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// Sign returns the manifest document with its signature field set (replaced
// if present). YAML stays YAML (comments kept); JSON stays JSON.
func Sign(data []byte, priv ed25519.PrivateKey) ([]byte, error) {
	root, diag := parseDocument("manifest", data)
	if diag != nil {
		return nil, fmt.Errorf("%w: %s", ErrSignature, diag)
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: manifest is not a map", ErrSignature)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "signature" {
			root.Content = append(root.Content[:i], root.Content[i+2:]...)
			break
		}
	}
	msg, err := canonical(root)
	if err != nil {
		return nil, err
	}
	fields, err := fieldDigests(root)
	if err != nil {
		return nil, err
	}
	sig := Signature{
		Algorithm: "ed25519",
		PublicKey: FormatPublicKey(priv.Public().(ed25519.PublicKey)),
		Value:     base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg)),
		Fields:    fields,
	}
	if isJSON(data) {
		var doc map[string]any
		if err := root.Decode(&doc); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSignature, err)
		}
		doc["signature"] = sig
		out, err := json.MarshalIndent(ijson(doc), "", "  ")
		return append(out, '\n'), err
	}
	var sn yaml.Node
	if err := sn.Encode(sig); err != nil {
		return nil, err
	}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "signature"}, &sn)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func isJSON(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) > 0 && t[0] == '{'
}

// VerifySignature checks the manifest's signature against a trusted key.
// A manifest without a signature, signed by another key, or altered after
// signing is a *SignatureError (wrapping ErrSignature and ErrUnsigned,
// ErrUntrustedKey or ErrAltered); an altered one names the fields that
// differ from what was signed.
func (m *Manifest) VerifySignature(trusted ed25519.PublicKey) error {
	pub, err := m.SignedIntact()
	if err != nil {
		return err
	}
	if !pub.Equal(trusted) {
		return &SignatureError{File: m.File, Key: m.Signature.PublicKey, Kind: ErrUntrustedKey,
			Detail: "the trusted key is " + FormatPublicKey(trusted) + "; re-sign with its private key (klock sign -k KEY)"}
	}
	return nil
}

// SignedIntact checks the signature against the key it names, whoever that
// is, and returns that key: a manifest that verifies was not changed since
// that key signed it. Whether the key is trusted is the caller's question.
func (m *Manifest) SignedIntact() (ed25519.PublicKey, error) {
	if m.Signature == nil {
		return nil, &SignatureError{File: m.File, Kind: ErrUnsigned, Detail: "sign it with a trusted key: klock sign -k KEY " + m.File}
	}
	pub, err := ParsePublicKey([]byte(m.Signature.PublicKey))
	if err != nil {
		return nil, &SignatureError{File: m.File, Key: m.Signature.PublicKey, Kind: ErrBadSignature, Detail: err.Error()}
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature.Value)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, &SignatureError{File: m.File, Key: m.Signature.PublicKey, Kind: ErrBadSignature, Detail: "signature.value is not a base64 ed25519 signature; re-sign with klock sign"}
	}
	msg, err := CanonicalBytes(m.raw)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return nil, &SignatureError{File: m.File, Key: m.Signature.PublicKey, Kind: ErrAltered, Changes: m.ChangedFields(),
			Detail: "the signature no longer verifies: restore the signed manifest, or have the change reviewed and re-signed (klock sign -k KEY)"}
	}
	return pub, nil
}
