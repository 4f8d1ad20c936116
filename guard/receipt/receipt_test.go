package receipt

import (
	"bytes"
	"reflect"
	"strings"

	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"github.com/gowebpki/jcs"
	"os"
	"testing"

	"github.com/klocklabs/klock/internal/hashchain"
)

func sample(i int) *Receipt {
	return &Receipt{
		ID: "rcpt-test", Timestamp: 1710000100, Time: "2024-03-09T16:01:40.00000000" + string(rune('0'+i)) + "Z",
		CapabilityID: "cap-1", AgentID: "agent-<1>", ToolName: "generate_text", Phase: PhasePreCharge,
		Action:   Action{Parameters: json.RawMessage(`{"max_tokens":500,"signature":"","seq":0,"time":"x"}`), ParameterHash: "sha256:00"},
		Decision: Decision{Verdict: Allow},
		Metadata: Metadata{Financial: &Financial{
			CostCharged: 150, Currency: "ETH", BudgetRemaining: U(1 << 60), BudgetTotal: U(1<<60 + 150),
			SettlementStatus: Pending, LedgerDebit: 150, InvocationDelta: 1,
		}},
	}
}

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestUnitsBeyond2p53AreStrings(t *testing.T) {
	b, _ := json.Marshal(struct{ A, B Units }{1 << 53, 1<<53 + 1})
	if string(b) != `{"A":9007199254740992,"B":"9007199254740993"}` {
		t.Fatalf("got %s", b)
	}
	for _, bad := range []string{`"5"`, `-1`, `1.5`, `""`, `"18446744073709551616"`} {
		var u Units
		if err := json.Unmarshal([]byte(bad), &u); !errors.Is(err, ErrMalformed) {
			t.Errorf("Units %s accepted: %v", bad, err)
		}
	}
}

func TestSignedChainVerifiesAndEveryByteFlipIsDetected(t *testing.T) {
	l, path, pub, priv := tempLog(t)
	for i := 0; i < 4; i++ {
		if _, err := l.Append(sample(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	s, err := VerifyFile(path, pub, func(r *Receipt) error { return Check(r, pub) })
	if err != nil || s.Receipts != 4 {
		t.Fatalf("verify: %+v %v", s, err)
	}
	other, _ := newKey(t)
	if _, err := VerifyFile(path, other, nil); !errors.Is(err, hashchain.ErrBroken) {
		t.Fatalf("a chain signed by another key verified against a pinned key: %v", err)
	}
	data, _ := os.ReadFile(path)
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x01
		os.WriteFile(path, bad, 0o600)
		if _, err := VerifyFile(path, nil, nil); err == nil {
			t.Fatalf("flipping byte %d (%q) was not detected: %s", i, data[i], data[max(0, i-80):min(len(data), i+20)])
		}
	}
	// Reopen continues the chain from the last receipt.
	os.WriteFile(path, data, 0o600)
	l, err = OpenLog(path, priv)
	if err != nil || l.Last() == nil || l.Last().Seq != 4 {
		t.Fatalf("reopen: last %+v err %v", l.Last(), err)
	}
	if _, err := l.Append(sample(5)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if s, err := VerifyFile(path, pub, nil); err != nil || s.Receipts != 5 {
		t.Fatalf("after reopen: %+v %v", s, err)
	}
}

func TestCheckRejectsAlteredReceipt(t *testing.T) {
	_, priv := newKey(t)
	r := sample(0)
	if err := Sign(r, priv); err != nil {
		t.Fatal(err)
	}
	if err := Check(r, nil); err != nil {
		t.Fatal(err)
	}
	r.Metadata.Financial.CostCharged++
	if err := Check(r, nil); !errors.Is(err, ErrSignature) {
		t.Fatalf("altered cost verified: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	_, priv := newKey(f)
	r := sample(0)
	r.Seq = 1
	Sign(r, priv)
	good, _ := json.Marshal(r)
	f.Add(good)
	f.Add([]byte(`{"seq":1}`))
	f.Add([]byte(`{"metadata":{"financial":{"cost_charged":"9007199254740993"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rc, err := Decode(line)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error not typed: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode and canonicalize without panic,
		// and a receipt that checks must still check after a round trip.
		ok := Check(rc, nil) == nil
		again, err := json.Marshal(rc)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		rc2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", again, err)
		}
		if ok && Check(rc2, nil) != nil {
			t.Fatalf("signature stopped verifying after a round trip: %s", again)
		}
	})
}

// alreadyCanonical relies on every struct declaring its JSON members in
// sorted order.
func TestStructMembersAreSorted(t *testing.T) {
	for _, v := range []any{Receipt{}, Action{}, Decision{}, Evidence{}, Metadata{}, Financial{}, OriginalAmount{},
		OracleEvidence{}, Cost{}, Envelope{}, Tokens{}, Actual{}} {
		typ := reflect.TypeOf(v)
		prev := ""
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name < prev {
				t.Errorf("%s: member %q declared after %q", typ.Name(), name, prev)
			}
			prev = name
		}
	}
}

func TestFastPathMatchesJCS(t *testing.T) {
	_, priv := newKey(t)
	for i, r := range []*Receipt{sample(0), {ID: "x", Time: "t", Decision: Decision{Verdict: Deny, Reason: "a<b & c>d"}},
		{ID: "é", Time: "t", Metadata: Metadata{Cost: &Cost{Exceeded: []string{"max_tokens_out"}, Actual: &Actual{TokensIn: 1 << 60, Source: "api-usage"}}}}} {
		r.Action.Parameters = nil
		p, err := Prepare(r, priv)
		if err != nil {
			t.Fatal(err)
		}
		line := p.chained(7, "ab", "ed25519:sig")
		canon, err := jcs.Transform(line)
		if err != nil || !bytes.Equal(canon, line) {
			t.Errorf("receipt %d: prepared line is not canonical:\n%s\n%s", i, line, canon)
		}
	}
}
