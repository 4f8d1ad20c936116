// Package trust decides, at launch, whether a manifest may run: KLIS-6
// makes the declared intent a signed manifest, so every entry point (klock
// run, mcp, meter, tools serve, and klockd for the sessions it starts)
// loads its manifest through Load, and none checks signatures its own way.
//
// Trust roots are ed25519 public keys: every *.pub file in DefaultDir
// (/etc/klock/trust) plus the keys named with --trust (a .pub file or
// ed25519:<base64>). A root file writable by anyone but its owner is
// refused, since whoever can write it can make any manifest trusted.
//
// The rules, with RequireSigned (--require-signed, klockd
// --require-signed):
//
//	unsigned                            refused (ErrUnsigned)
//	signed, then altered                refused, naming the key and the fields that differ (ErrAltered)
//	signed by a key that is no root     refused (ErrUntrustedKey)
//	signed by a root, intact            runs
//
// Without it an unsigned manifest runs, a signed one signed by a key that
// is no root runs with a warning, and an altered one is still refused: a
// signature that no longer verifies is evidence of tampering whatever the
// policy.
//
// Errors wrap policy.ErrSignature and the kind (policy.ErrUnsigned,
// ErrAltered, ErrUntrustedKey), or ErrRoots for trust roots that cannot be
// read; each says what to do.
package trust
