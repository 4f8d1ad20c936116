package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/gowebpki/jcs"
)

// contentHash is a call's receipt content_hash (seed 003): its arguments
// and its result, as one canonical (RFC 8785) JSON object. In confidential
// mode it is the deployment's keyed digest, as the audit keeps, never a
// plain SHA-256 someone could confirm a guess against.
func (g *Gateway) contentHash(args map[string]any, result json.RawMessage, confidential bool) string {
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	v := map[string]any{"arguments": args, "result": result}
	if confidential {
		return g.hash.Digest(v)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	if c, err := jcs.Transform(raw); err == nil {
		raw = c
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}
