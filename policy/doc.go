// Package policy owns the klock manifest: its model, its strict decoding from
// YAML or JSON, its validation against the rules of the seeds, its signature,
// and its compilation into the Ruleset that kernel backends load and that
// answers Allows(triple).
//
// It is pure Go: no syscalls, no file system access beyond reading the
// manifest file in Load. Everything downstream (enforcer, snapshot, guard)
// consumes a *Manifest or a *Ruleset and never reaches back into parsing.
//
// Error semantics: Parse and Load return a *ValidationError (errors.Is
// ErrInvalidManifest) that lists every Diagnostic found, each located at
// file:line:column with the field path, what is wrong and what would be
// right. Warnings never fail a load; they are kept on Manifest.Warnings.
// Signature problems wrap ErrSignature.
package policy
