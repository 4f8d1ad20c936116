package main

import (
	"errors"
	"github.com/klocklabs/klock/guard/budget"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/trust"
	"github.com/spf13/cobra"
)

// trustFlags are the signature flags of every command that runs a manifest
// (run, mcp, meter, tools serve); the check itself is trust.Load.
type trustFlags struct {
	requireSigned bool
	keys          []string
	dir           string
}

func (f *trustFlags) register(c *cobra.Command) {
	c.Flags().BoolVar(&f.requireSigned, "require-signed", false, "refuse a manifest that is unsigned, altered since signing, or signed by a key that is not trusted")
	c.Flags().StringArrayVar(&f.keys, "trust", nil, "trust this signing key besides those in "+trust.DefaultDir+"/*.pub (a .pub file or ed25519:<base64>; repeatable)")
	c.Flags().StringVar(&f.dir, "trust-dir", trust.DefaultDir, "directory of trusted signing keys (*.pub)")
}

func (f *trustFlags) options() trust.Options {
	dir := f.dir
	if dir == "" {
		dir = "-"
	}
	return trust.Options{RequireSigned: f.requireSigned, Keys: f.keys, Dir: dir}
}

// load reads and admits the manifest.
func (f *trustFlags) load(path string) (*policy.Manifest, []byte, error) {
	return trust.Load(path, f.options())
}

// manifestRefused is the exit status for a manifest that did not load: 1
// (invalid manifest or signature) unless the command has its own.
func manifestRefused(err error) bool {
	var ve *policy.ValidationError
	// A delegation that would widen its parent's budget, or names no
	// grant of the ledger, is the manifest's fault too.
	return errors.As(err, &ve) || errors.Is(err, policy.ErrSignature) || errors.Is(err, trust.ErrRoots) ||
		errors.Is(err, budget.ErrWiden) || errors.Is(err, budget.ErrUnknownGrant)
}
