package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// A receipt's content_hash covers the arguments and the
// result; in confidential mode it is the deployment's keyed digest (as the
// audit keeps), never a plain SHA-256 of guessable values.
func TestContentHashIsKeyedWhenConfidential(t *testing.T) {
	g, _ := contractGateway(t, false)
	args := map[string]any{"amount_usd": 5.0}
	plain := g.contentHash(args, json.RawMessage(`{"refund_id":"rf_1"}`), false)
	keyed := g.contentHash(args, json.RawMessage(`{"refund_id":"rf_1"}`), true)
	other := g.contentHash(args, json.RawMessage(`{"refund_id":"rf_2"}`), false)
	if !strings.HasPrefix(plain, "sha256:") || !strings.HasPrefix(keyed, "hmac-sha256:") || plain == other {
		t.Fatalf("plain %q keyed %q other %q", plain, keyed, other)
	}
	// Canonical: the same content in another member order hashes alike.
	if g.contentHash(args, json.RawMessage(`{ "refund_id" : "rf_1" }`), false) != plain {
		t.Fatal("content_hash depends on the result's spelling")
	}
}
