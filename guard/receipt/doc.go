// Package receipt owns klock's signed decision receipts: one JSON object per
// decision of the cost path (a pre-charge allowed or denied, a reconcile, a
// reversal, a Token Guard refusal), with the fields of Chio receipts and
// their financial metadata (seed 003, SPEC-DIGEST.md).
//
// A receipt is signed with ed25519 over the RFC 8785 (JCS) canonical JSON of
// the receipt without its "signature" field, the approach policy/sign.go
// takes for manifests. Money is u64 minor units; a value beyond 2^53, which
// canonical JSON numbers cannot carry exactly, is written as a decimal string
// (type Units), so two receipts differing only there never share a signature.
//
// A batch appended with Log.AppendBatch is signed once instead: over the
// RFC 6962 Merkle root of its receipts, each of which carries its
// inclusion proof ("proof") and so still verifies alone (merkle.go).
//
// Receipts are chained with internal/hashchain: each carries "seq" and
// "prev" (the SHA-256 of the previous receipt's line, or of its Merkle
// leaf when it was signed in a batch: Linker). Log appends; Verify
// and VerifyFile check every signature and link offline, with nothing but
// the file (and optionally a pinned public key).
//
// # Errors
//
// Verification failures wrap hashchain.ErrBroken (the chain) and carry
// ErrSignature, ErrProof (a leaf, path or root that does not hash up to
// the signed root), ErrEvidence (a decision its evidence contradicts:
// each guard that decided records its verdict and the facts it used in
// "evidence") or ErrMalformed in their reason; Check returns them
// wrapped; Decode returns ErrMalformed.
// The package never decides whether money may be spent: it records what the
// budget package decided.
package receipt
