package trust

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// keypair writes NAME.pub (0644) in dir and returns the private key.
func keypair(t *testing.T, dir, name string) []byte {
	t.Helper()
	priv, pub, err := policy.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return priv
}

// signed writes the refund agent signed by privPEM (nil: unsigned), its
// maintainer approval signed by the same key unless freeText.
func signed(t *testing.T, dir, name string, privPEM []byte, freeText ...bool) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/manifests/refund-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if privPEM != nil {
		priv, err := policy.ParsePrivateKey(privPEM)
		if err != nil {
			t.Fatal(err)
		}
		if len(freeText) == 0 {
			if data, err = policy.SignApproval(data, priv, "payments-maintainers", "SEC-1142"); err != nil {
				t.Fatal(err)
			}
		}
		if data, err = policy.Sign(data, priv); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadAdmits: the launch check every entry point uses, rule by rule.
func TestLoadAdmits(t *testing.T) {
	rootsDir, other, work := t.TempDir(), t.TempDir(), t.TempDir()
	trusted := keypair(t, rootsDir, "ops")
	untrusted := keypair(t, other, "stranger")
	good := signed(t, work, "good.yaml", trusted)
	stranger := signed(t, work, "stranger.yaml", untrusted)
	unsigned := signed(t, work, "unsigned.yaml", nil)
	data, _ := os.ReadFile(good)
	altered := filepath.Join(work, "altered.yaml")
	os.WriteFile(altered, bytes.Replace(data, []byte("per_run: 3"), []byte("per_run: 300"), 1), 0o644)

	req := Options{RequireSigned: true, Dir: rootsDir}
	if _, _, err := Load(good, req); err != nil {
		t.Fatalf("signed by a root: %v", err)
	}
	if _, _, err := Load(good, Options{RequireSigned: true, Dir: "-", Keys: []string{filepath.Join(rootsDir, "ops.pub")}}); err != nil {
		t.Fatalf("signed by a --trust key: %v", err)
	}
	for _, tc := range []struct {
		file string
		kind error
		says []string
	}{
		{unsigned, policy.ErrUnsigned, []string{"klock sign"}},
		{stranger, policy.ErrUntrustedKey, []string{"ed25519:", "--trust"}},
		{altered, policy.ErrAltered, []string{"ed25519:", "rate_limits (tool issue_refund) changed", "altered.yaml:"}},
	} {
		_, _, err := Load(tc.file, req)
		if !errors.Is(err, tc.kind) || !errors.Is(err, policy.ErrSignature) {
			t.Errorf("%s: %v, want %v", filepath.Base(tc.file), err, tc.kind)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: message lacks %q: %v", filepath.Base(tc.file), s, err)
			}
		}
	}

	// Not required: unsigned runs, a stranger's signature runs with a
	// warning, an altered manifest is still refused.
	var warn bytes.Buffer
	lax := Options{Dir: rootsDir, Warn: &warn}
	if _, _, err := Load(unsigned, lax); err != nil {
		t.Errorf("unsigned, not required: %v", err)
	}
	if _, _, err := Load(stranger, lax); err != nil || !strings.Contains(warn.String(), "not trusted") {
		t.Errorf("stranger, not required: %v, warning %q", err, warn.String())
	}
	if _, _, err := Load(altered, lax); !errors.Is(err, policy.ErrAltered) {
		t.Errorf("altered, not required: %v, want ErrAltered", err)
	}

	// Required with no roots at all says where roots go.
	if _, _, err := Load(good, Options{RequireSigned: true, Dir: "-"}); !errors.Is(err, ErrRoots) || !strings.Contains(err.Error(), DefaultDir) {
		t.Errorf("no roots: %v", err)
	}
	// A root anyone may rewrite is no root.
	os.Chmod(filepath.Join(rootsDir, "ops.pub"), 0o666)
	if _, _, err := Load(good, req); !errors.Is(err, ErrRoots) || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("group-writable root: %v", err)
	}
}

// TestMaintainerApprovalNeedsATrustedKey: HOTL with an organizational tool
// runs only on a maintainer approval signed by a root; free text makes the
// agent HITL (refused under RequireSigned).
func TestMaintainerApprovalNeedsATrustedKey(t *testing.T) {
	rootsDir, work := t.TempDir(), t.TempDir()
	maint := keypair(t, rootsDir, "maintainer")
	free := signed(t, work, "free.yaml", maint, true) // signed manifest, free-text approval
	var warn bytes.Buffer
	m, _, err := Load(free, Options{Dir: rootsDir, Warn: &warn})
	if err != nil {
		t.Fatal(err)
	}
	if mode, _ := m.EffectiveHITL(); mode != policy.HITLModeHITL || !strings.Contains(warn.String(), "free text") {
		t.Fatalf("free-text approval: %s, warning %q; want HITL and a warning", mode, warn.String())
	}
	if _, _, err := Load(free, Options{Dir: rootsDir, RequireSigned: true}); !errors.Is(err, policy.ErrApproval) {
		t.Fatalf("free-text approval, signatures required: %v", err)
	}
	data, _ := os.ReadFile(free)
	priv, _ := policy.ParsePrivateKey(maint)
	approved, err := policy.SignApproval(data, priv, "payments-maintainers", "SEC-1142")
	if err != nil {
		t.Fatal(err)
	}
	if approved, err = policy.Sign(approved, priv); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(work, "approved.yaml")
	os.WriteFile(p, approved, 0o644)
	m, _, err = Load(p, Options{Dir: rootsDir, RequireSigned: true})
	if err != nil {
		t.Fatal(err)
	}
	if mode, _ := m.EffectiveHITL(); mode != policy.HITLModeHOTL {
		t.Fatalf("signed approval by a root: %s, want HOTL", mode)
	}
}
