package policy

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestSignVerify(t *testing.T) {
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../examples/manifests/refund-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := Sign(data, priv)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(signed), "# The refund agent of seed 002") {
		t.Error("signing dropped the manifest's comments")
	}
	m, err := Parse("signed.yaml", signed)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.VerifySignature(pub); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// Re-signing replaces, never duplicates, the signature.
	again, err := Sign(signed, priv)
	if err != nil || strings.Count(string(again), "signature:") != 1 {
		t.Fatalf("re-sign: %v\n%s", err, again)
	}

	// Tampering with any value is detected.
	tampered := strings.Replace(string(signed), "max_invocations: 3", "max_invocations: 30", 1)
	tm, err := Parse("t.yaml", []byte(tampered))
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.VerifySignature(pub); !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), "changed after it was signed") {
		t.Fatalf("tamper not detected: %v", err)
	}
	// Another key is not trusted.
	_, otherPEM, _ := GenerateKey()
	other, _ := ParsePublicKey(otherPEM)
	if err := m.VerifySignature(other); !errors.Is(err, ErrSignature) {
		t.Fatalf("foreign key accepted: %v", err)
	}
	// Unsigned manifests do not verify.
	um, _ := Parse("u.yaml", data)
	if err := um.VerifySignature(pub); !errors.Is(err, ErrSignature) {
		t.Fatalf("unsigned accepted: %v", err)
	}

	// The same document as JSON carries the same signature (canonical form).
	var doc map[string]any
	if err := yaml.Unmarshal(signed, &doc); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(doc)
	jm, err := Parse("signed.json", js)
	if err != nil {
		t.Fatal(err)
	}
	if err := jm.VerifySignature(pub); err != nil {
		t.Fatalf("JSON rendering of a signed YAML manifest must verify: %v", err)
	}
}

func TestCanonicalBigIntegers(t *testing.T) {
	a, err := CanonicalBytes([]byte("x: 18446744073709551615\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := CanonicalBytes([]byte("x: 18446744073709551614\n"))
	if string(a) == string(b) {
		t.Fatal("integers beyond 2^53 must stay distinct in the canonical form")
	}
}
