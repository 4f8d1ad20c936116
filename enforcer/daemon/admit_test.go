//go:build linux

package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/trust"
)

// TestAdmitRefusesUnsigned: klockd --require-signed refuses a session whose
// manifest no trusted key signed, whatever the client checked, and runs
// one a trusted key signed.
func TestAdmitRefusesUnsigned(t *testing.T) {
	privPEM, pubPEM, err := policy.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := policy.ParsePublicKey(pubPEM)
	admit, err := trust.Options{RequireSigned: true, Dir: "-", Keys: []string{policy.FormatPublicKey(pub)}}.Admitter()
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{Admit: admit})
	_, mpath, data := manifest(t, policy.ModeStrict)
	runIt := func(data []byte) error {
		m, err := policy.Parse(mpath, data)
		if err != nil {
			t.Fatal(err)
		}
		res, used, err := RunViaDaemon(context.Background(), s.Addr(), session.Options{
			Manifest: m, ManifestPath: mpath, ManifestData: data, User: agentUser(), AllowDegraded: true,
			Command: []string{"/usr/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"},
		})
		if !used {
			t.Fatalf("daemon not used: %v", err)
		}
		if err == nil && res.Exit.Code != 0 {
			t.Fatalf("session: %+v", res)
		}
		return err
	}
	if err := runIt(data); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("unsigned manifest through klockd --require-signed: %v, want refused as not signed", err)
	}
	priv, _ := policy.ParsePrivateKey(privPEM)
	signed, err := policy.Sign(data, priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := runIt(signed); err != nil {
		t.Fatalf("signed by the trusted key: %v", err)
	}
}
