// Package detect probes, for real, which enforcement mechanisms this kernel
// offers: it loads and attaches a trivial program or builds a trivial
// ruleset for each, never trusting version numbers or the LSM list alone.
// It reports what each mechanism guarantees, why one is missing and how to
// enable it. It changes nothing it does not undo.
package detect
