// Package trust tests the launch-time signature check through the real
// klock binary: klock run, mcp, meter and tools serve with --require-signed
// refuse a manifest tampered with after signing (naming the key and the
// field that differs), an unsigned one and one signed by a key that is not
// trusted, and run a manifest signed by a trusted key. It also holds the
// permissive-mode production warning, printed once (KLIS-6 §3.2).
//
// klock run's sessions need root; the other entry points run as anyone.
package trust
