package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/klocklabs/klock/guard/costreport"
	"github.com/klocklabs/klock/policy/money"
)

// Chio receipts (seed 003, SPEC-DIGEST.md) are what a Chio kernel signs for
// each tool call: id, timestamp, capability_id, tool_server, tool_name,
// action {parameters, parameter_hash}, decision, content_hash, policy_hash,
// evidence[], metadata.financial, kernel_key and signature (ed25519 over
// the RFC 8785 canonical JSON of the receipt without its signature), with
// an optional prev_hash linking a receipt to the one before. The seed's
// example writes the key "ed25519:pub:<hex>" and the signature
// "ed25519:<hex>"; klock's own base64 spellings are read too, so one
// verifier reads both.

// ChioReceipt is one Chio-format receipt.
type ChioReceipt struct {
	Action       ChioAction      `json:"action"`
	CapabilityID string          `json:"capability_id"`
	ContentHash  string          `json:"content_hash"`
	Decision     Decision        `json:"decision"`
	Evidence     []ChioEvidence  `json:"evidence"`
	ID           string          `json:"id"`
	KernelKey    string          `json:"kernel_key"`
	Metadata     ChioMetadata    `json:"metadata"`
	PolicyHash   string          `json:"policy_hash"`
	PrevHash     string          `json:"prev_hash,omitempty"`
	Signature    string          `json:"signature"`
	Timestamp    int64           `json:"timestamp"`
	ToolName     string          `json:"tool_name"`
	ToolServer   string          `json:"tool_server"`
	raw          json.RawMessage // the receipt as read, for the signature and the chain
}

// ChioAction is what was attempted.
type ChioAction struct {
	ParameterHash string          `json:"parameter_hash"`
	Parameters    json.RawMessage `json:"parameters"`
}

// ChioEvidence is one guard's verdict; details may be null.
type ChioEvidence struct {
	Details   *string `json:"details"`
	GuardName string  `json:"guard_name"`
	Verdict   bool    `json:"verdict"`
}

// ChioMetadata holds the financial record; other metadata is kept (and
// signed) but not interpreted.
type ChioMetadata struct {
	Financial *ChioFinancial `json:"financial"`
}

// ChioFinancial is seed 003's FinancialReceiptMetadata, as Chio writes it.
type ChioFinancial struct {
	AttemptedCost    *uint64         `json:"attempted_cost"`
	BudgetRemaining  uint64          `json:"budget_remaining"`
	BudgetTotal      uint64          `json:"budget_total"`
	CostBreakdown    json.RawMessage `json:"cost_breakdown"`
	CostCharged      uint64          `json:"cost_charged"`
	Currency         string          `json:"currency"`
	DelegationDepth  uint32          `json:"delegation_depth"`
	GrantIndex       uint32          `json:"grant_index"`
	OracleEvidence   *OracleEvidence `json:"oracle_evidence"`
	PaymentReference *string         `json:"payment_reference"`
	RootBudgetHolder string          `json:"root_budget_holder"`
	SettlementStatus string          `json:"settlement_status"`
}

// ChioSummary is what a verified set of Chio receipts holds.
type ChioSummary struct {
	Receipts  int
	KernelKey string
}

// LooksChio reports whether data holds Chio-format receipts rather than a
// klock chain: klock's lines carry "seq" and "phase", Chio's neither (and
// Chio receipts may be pretty-printed or in a JSON array).
func LooksChio(data []byte) bool {
	d := json.NewDecoder(bytes.NewReader(data))
	var first json.RawMessage
	if d.Decode(&first) != nil {
		return false
	}
	first = bytes.TrimSpace(first)
	if len(first) > 0 && first[0] == '[' {
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(first, &m) != nil {
		return false
	}
	_, seq := m["seq"]
	_, phase := m["phase"]
	return !seq && !phase
}

// VerifyChio checks Chio-format receipts offline: one JSON object, a JSON
// array of them, or one per line. For each: its fields (strictly: a field
// the format does not have is an error), its signature with its own
// kernel_key (the trusted one when given; every receipt by one key), its
// parameter_hash against its parameters, its financial metadata's
// consistency (a known currency and settlement status, remaining within
// total, a breakdown of amounts summing to cost_charged, a usable oracle
// rate), and each prev_hash against the receipt before it.
func VerifyChio(r io.Reader, trusted ed25519.PublicKey) (ChioSummary, error) {
	var s ChioSummary
	rs, err := readChio(r)
	if err != nil {
		return s, err
	}
	if len(rs) == 0 {
		return s, fmt.Errorf("%w: no Chio receipt in the input", ErrMalformed)
	}
	var prev json.RawMessage
	for i, rc := range rs {
		where := fmt.Sprintf("Chio receipt %d (%s)", i+1, rc.ID)
		if err := rc.check(trusted); err != nil {
			return s, fmt.Errorf("%s: %w", where, err)
		}
		if s.KernelKey == "" {
			s.KernelKey = rc.KernelKey
		} else if rc.KernelKey != s.KernelKey {
			return s, fmt.Errorf("%s: %w: signed by %s, the others by %s", where, ErrSignature, rc.KernelKey, s.KernelKey)
		}
		if rc.PrevHash != "" {
			if prev == nil {
				return s, fmt.Errorf("%s: %w: prev_hash %s but no receipt before it here (verify the whole chain)", where, ErrMalformed, rc.PrevHash)
			}
			if want, err := digest(prev); err != nil || rc.PrevHash != want {
				return s, fmt.Errorf("%s: %w: prev_hash %s, the receipt before hashes to %s", where, ErrSignature, rc.PrevHash, want)
			}
		}
		prev = rc.raw
		s.Receipts++
	}
	return s, nil
}

func readChio(r io.Reader) ([]*ChioReceipt, error) {
	d := json.NewDecoder(r)
	var out []*ChioReceipt
	for {
		var v json.RawMessage
		if err := d.Decode(&v); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		items := []json.RawMessage{v}
		if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '[' {
			items = nil
			if err := json.Unmarshal(t, &items); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
		}
		for _, it := range items {
			rc, err := decodeChio(it)
			if err != nil {
				return nil, fmt.Errorf("Chio receipt %d: %w", len(out)+1, err)
			}
			out = append(out, rc)
		}
	}
}

func decodeChio(raw json.RawMessage) (*ChioReceipt, error) {
	// Strict at the top and in the financial record, where a misspelt
	// field would hide money; metadata may carry other records.
	var top ChioReceipt
	var loose struct {
		ChioReceipt
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &loose); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var shape map[string]json.RawMessage
	json.Unmarshal(raw, &shape)
	delete(shape, "metadata")
	strict, _ := json.Marshal(shape)
	d := json.NewDecoder(bytes.NewReader(strict))
	d.DisallowUnknownFields()
	if err := d.Decode(&top); err != nil {
		return nil, fmt.Errorf("%w: %v (the fields are seed 003's: id, timestamp, capability_id, tool_server, tool_name, action, decision, content_hash, policy_hash, evidence, metadata, kernel_key, signature, prev_hash)", ErrMalformed, err)
	}
	if len(loose.Metadata) > 0 {
		var md map[string]json.RawMessage
		if err := json.Unmarshal(loose.Metadata, &md); err != nil {
			return nil, fmt.Errorf("%w: metadata: %v", ErrMalformed, err)
		}
		if f, ok := md["financial"]; ok && string(bytes.TrimSpace(f)) != "null" {
			var fin ChioFinancial
			fd := json.NewDecoder(bytes.NewReader(f))
			fd.DisallowUnknownFields()
			if err := fd.Decode(&fin); err != nil {
				return nil, fmt.Errorf("%w: metadata.financial: %v", ErrMalformed, err)
			}
			top.Metadata.Financial = &fin
		}
	}
	top.raw = append(json.RawMessage(nil), raw...)
	return &top, nil
}

func (rc *ChioReceipt) check(trusted ed25519.PublicKey) error {
	switch {
	case rc.ID == "" || rc.ToolName == "" || rc.Timestamp <= 0:
		return fmt.Errorf("%w: id, tool_name and a positive timestamp are required", ErrMalformed)
	case rc.Signature == "" || rc.KernelKey == "":
		return fmt.Errorf("%w: no signature or kernel_key: an unsigned receipt proves nothing", ErrMalformed)
	}
	switch rc.Decision.Verdict {
	case Allow, Deny, Cancelled, Incomplete:
	default:
		return fmt.Errorf("%w: decision.verdict %q (want allow, deny, cancelled or incomplete)", ErrMalformed, rc.Decision.Verdict)
	}
	pub, err := chioKey(rc.KernelKey)
	if err != nil {
		return err
	}
	if trusted != nil && !pub.Equal(trusted) {
		return fmt.Errorf("%w: signed by %s, not by the trusted key", ErrSignature, rc.KernelKey)
	}
	sig, err := chioSig(rc.Signature)
	if err != nil {
		return err
	}
	msg, err := chioSigned(rc.raw)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("%w: the receipt was altered after signing (or signed by another key)", ErrSignature)
	}
	if p := bytes.TrimSpace(rc.Action.Parameters); len(p) > 0 && rc.Action.ParameterHash != "" {
		want, err := digest(p)
		if err != nil {
			return fmt.Errorf("%w: action.parameters: %v", ErrMalformed, err)
		}
		if rc.Action.ParameterHash != want {
			return fmt.Errorf("%w: action.parameter_hash %s, the parameters hash to %s", ErrSignature, rc.Action.ParameterHash, want)
		}
	}
	if f := rc.Metadata.Financial; f != nil {
		return f.check()
	}
	return nil
}

func (f *ChioFinancial) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: metadata.financial: %s", ErrMalformed, fmt.Sprintf(format, a...))
	}
	if _, err := money.Exponent(f.Currency); err != nil {
		return bad("currency: %v", err)
	}
	switch f.SettlementStatus {
	case NotApplicable, Pending, Settled, Failed:
	default:
		return bad("settlement_status %q (want not_applicable, pending, settled or failed)", f.SettlementStatus)
	}
	if f.BudgetRemaining > f.BudgetTotal {
		return bad("budget_remaining %d exceeds budget_total %d", f.BudgetRemaining, f.BudgetTotal)
	}
	if b := bytes.TrimSpace(f.CostBreakdown); len(b) > 0 && string(b) != "null" {
		// Breakdowns are tool-defined; one made of amounts must add up.
		if sum, err := costreport.Breakdown(b, f.Currency); err == nil && sum.Units != f.CostCharged {
			return bad("cost_breakdown sums to %d, cost_charged is %d", sum.Units, f.CostCharged)
		}
	}
	if o := f.OracleEvidence; o != nil {
		r := money.Rate{From: o.FromCurrency, To: o.ToCurrency, Numerator: uint64(o.RateNumerator), Denominator: uint64(o.RateDenominator), MarginBPS: o.MarginBPS}
		if _, err := r.Convert(money.Amount{Currency: r.From}); err != nil || o.OracleSource == "" {
			return bad("oracle_evidence: an unusable rate or no oracle_source (%v)", err)
		}
		if o.ToCurrency != f.Currency {
			return bad("oracle_evidence converts to %s, the charge is in %s", o.ToCurrency, f.Currency)
		}
	}
	return nil
}

// chioSigned is the canonical JSON of the receipt without its signature.
func chioSigned(raw json.RawMessage) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	delete(m, "signature")
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	c, err := jcs.Transform(b)
	if err != nil {
		return nil, fmt.Errorf("%w: canonicalize: %v", ErrMalformed, err)
	}
	return c, nil
}

// digest is "sha256:" and the hex SHA-256 of v's canonical JSON.
func digest(v json.RawMessage) (string, error) {
	c, err := jcs.Transform(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func chioKey(s string) (ed25519.PublicKey, error) {
	b, err := chioBytes(s, "ed25519:pub:", ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("%w: kernel_key %q: %v", ErrMalformed, s, err)
	}
	return ed25519.PublicKey(b), nil
}

func chioSig(s string) ([]byte, error) {
	b, err := chioBytes(s, sigPrefix, ed25519.SignatureSize)
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	return b, nil
}

// chioBytes reads "<prefix><hex>" (the seed's spelling) or, for klock's,
// "ed25519:<base64>".
func chioBytes(s, prefix string, n int) ([]byte, error) {
	if v, ok := strings.CutPrefix(s, prefix); ok {
		if b, err := hex.DecodeString(v); err == nil && len(b) == n {
			return b, nil
		}
	}
	if v, ok := strings.CutPrefix(s, sigPrefix); ok {
		if b, err := base64.StdEncoding.Strict().DecodeString(v); err == nil && len(b) == n {
			return b, nil
		}
	}
	return nil, fmt.Errorf("want %s followed by %d bytes in hex", prefix, n)
}

// SignChio signs a Chio-format receipt (a JSON object) with priv, in the
// seed's spelling: it sets kernel_key and signature and returns the
// receipt. klock's tests and fixtures use it.
func SignChio(raw json.RawMessage, priv ed25519.PrivateKey) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	key, _ := json.Marshal("ed25519:pub:" + hex.EncodeToString(priv.Public().(ed25519.PublicKey)))
	m["kernel_key"] = key
	delete(m, "signature")
	b, _ := json.Marshal(m)
	msg, err := chioSigned(b)
	if err != nil {
		return nil, err
	}
	sig, _ := json.Marshal(sigPrefix + hex.EncodeToString(ed25519.Sign(priv, msg)))
	m["signature"] = sig
	return json.Marshal(m)
}
