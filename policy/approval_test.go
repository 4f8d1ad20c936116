package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestMaintainerApprovalIsASignature: HOTL with an
// organizational tool needed only free text; the approval is now a
// maintainer's signature, voided by any later change.
func TestMaintainerApprovalIsASignature(t *testing.T) {
	data, err := os.ReadFile("../examples/manifests/refund-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse("refund.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.NeedsMaintainerApproval(); len(got) != 1 || got[0] != "delete_account" {
		t.Fatalf("NeedsMaintainerApproval = %v", got)
	}
	if _, err := m.ApprovalKey(); !errors.Is(err, ErrApproval) || !strings.Contains(err.Error(), "free text") {
		t.Fatalf("free-text approval: %v, want refused as free text", err)
	}
	privPEM, pubPEM, _ := GenerateKey()
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	approved, err := SignApproval(data, priv, "payments-maintainers", "SEC-1142")
	if err != nil {
		t.Fatal(err)
	}
	m, err = Parse("refund.yaml", approved)
	if err != nil {
		t.Fatalf("%v\n%s", err, approved)
	}
	if k, err := m.ApprovalKey(); err != nil || !k.Equal(pub) {
		t.Fatalf("signed approval: %v", err)
	}
	// The manifest's own signature over it still works.
	signed, err := Sign(approved, priv)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = Parse("refund.yaml", signed); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ApprovalKey(); err != nil {
		t.Fatalf("approval after the manifest was signed: %v", err)
	}
	// A tool changed after the approval voids it.
	changed := strings.Replace(string(approved), "blast_radius: organizational", "blast_radius: organizational\n    description: widened", 1)
	if m, err = Parse("refund.yaml", []byte(changed)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ApprovalKey(); !errors.Is(err, ErrApproval) || !strings.Contains(err.Error(), "no longer verifies") {
		t.Fatalf("changed after approval: %v", err)
	}
}
