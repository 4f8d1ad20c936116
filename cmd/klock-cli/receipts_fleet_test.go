package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/policy/money"
)

// Two hosts in a fleet (each its own marker, as klockd writes it) charge
// one grant through the ledger klock mcp and klock tools serve use
// (fleetLedger); klock receipts verify --fleet finds that their chains add
// up to the fleet ledger in etcd, and that one host's chain alone does not.
func TestReceiptsVerifyFleet(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := context.Background()
	k := budget.Key{Capability: "agent-7", Grant: 0}
	per, total := uint64(5), uint64(1000)
	g := budget.Grant{Key: k, Tool: "pay", Limits: budget.Limits{Currency: "USD", PerInvocation: &per, Total: &total, MaxInvocations: 50}}
	var dirs []string
	for _, h := range []string{"hostA", "hostB"} {
		marker := filepath.Join(t.TempDir(), "fleet.json")
		t.Setenv(fleet.MarkerEnv, marker)
		if err := fleet.WriteMarker(fleet.Config{Endpoints: c.Endpoints(), Prefix: "/verify", Host: h}); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		s, err := budget.Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv, budget.WithGroupCommit(16))
		if err != nil {
			t.Fatal(err)
		}
		led, closeB, err := fleetLedger(s, dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := led.(*budget.Store); ok {
			t.Fatal("a host in a fleet charges its own store alone")
		}
		if err := led.Define(ctx, g); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 30; i++ {
			hold, err := led.Reserve(ctx, budget.Request{Key: k, Tool: "pay"})
			if err != nil {
				if !strings.Contains(err.Error(), "max_invocations") || h != "hostB" {
					t.Fatalf("%s: call %d: %v", h, i, err)
				}
				continue
			}
			if _, err := led.Reconcile(ctx, hold.ID, budget.Settle{Actual: money.Amount{Units: 2, Currency: "USD"}}); err != nil {
				t.Fatal(err)
			}
		}
		closeB()
		dirs = append(dirs, dir)
	}
	out, code := run(t, append([]string{"receipts", "verify", "--fleet"}, dirs...)...)
	if code != exitOK || !strings.Contains(out, "agent-7#0: 2 members used 50 invocations and 1.00 USD; receipts: 50 and 1.00 USD") || !strings.Contains(out, "add up") {
		t.Fatalf("verify --fleet: %d %s", code, out)
	}
	out, code = run(t, "receipts", "verify", "--etcd-endpoints", strings.Join(c.Endpoints(), ","), "--etcd-prefix", "/verify", dirs[0])
	if code != exitInvalid || !strings.Contains(out, "MISMATCH") {
		t.Fatalf("verify --fleet of one host's chain: %d %s", code, out)
	}
}
