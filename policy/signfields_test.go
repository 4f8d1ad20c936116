package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestAlteredNamesTheField: a manifest changed after signing is refused
// naming the field and the line that differ from what was signed, not only
// "the signature does not verify".
func TestAlteredNamesTheField(t *testing.T) {
	privPEM, pubPEM, _ := GenerateKey()
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	data, err := os.ReadFile("../examples/manifests/refund-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := Sign(data, priv)
	if err != nil {
		t.Fatal(err)
	}
	tampered := strings.Replace(string(signed), "per_run: 3", "per_run: 300", 1)
	if tampered == string(signed) {
		t.Fatal("fixture lacks per_run: 3")
	}
	line := 1 + strings.Count(tampered[:strings.Index(tampered, "per_run: 300")], "\n")
	m, err := Parse("t.yaml", []byte(tampered))
	if err != nil {
		t.Fatal(err)
	}
	err = m.VerifySignature(pub)
	var se *SignatureError
	if !errors.As(err, &se) || !errors.Is(err, ErrAltered) || !errors.Is(err, ErrSignature) {
		t.Fatalf("want an altered *SignatureError, got %v", err)
	}
	if len(se.Changes) != 1 {
		t.Fatalf("want the one changed field, got %v", se.Changes)
	}
	c := se.Changes[0]
	if !strings.HasSuffix(c.Field, ".rate_limits") || c.Kind != "changed" || c.Pos.Line == 0 || c.Pos.Line > line {
		t.Fatalf("change located at %v (line %d), want a tool's rate_limits at or above line %d", c, c.Pos.Line, line)
	}
	if !strings.Contains(err.Error(), se.Key) || !strings.Contains(err.Error(), c.Field) {
		t.Errorf("message names neither key nor field: %v", err)
	}

	// An intent appended is named as added, at its line.
	last := "  - CONSUMES NET:api.payments.example.com:443/tcp\n"
	m2, err := Parse("t.yaml", []byte(strings.Replace(string(signed), last, last+"  - CONSUMES FILE:/etc/**\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.VerifySignature(pub); err == nil || !strings.Contains(err.Error(), "intents[") || !strings.Contains(err.Error(), " added") {
		t.Errorf("appended intent not named: %v", err)
	}
}
