package policy

import (
	"errors"
	"fmt"
	"strings"
)

// What is wrong with a manifest's signature. Each *SignatureError wraps
// ErrSignature and one of these, so a caller can tell an unsigned manifest
// (sign it) from an altered one (someone changed it: find out who) from one
// signed by a key this host does not trust (add the key, or re-sign).
var (
	ErrUnsigned      = errors.New("manifest is not signed")
	ErrAltered       = errors.New("manifest was changed after it was signed")
	ErrUntrustedKey  = errors.New("manifest is signed by a key that is not trusted")
	ErrBadSignature  = errors.New("manifest signature is malformed")
	maxChangesListed = 8
)

// SignatureError says why a manifest's signature was not accepted, naming
// the file, the key it claims, and for an altered manifest the fields that
// differ from what was signed.
type SignatureError struct {
	File    string
	Key     string        // the signature's public key (ed25519:...), "" when unsigned
	Kind    error         // ErrUnsigned, ErrAltered, ErrUntrustedKey or ErrBadSignature
	Changes []FieldChange // ErrAltered: where, when the signature recorded field digests
	Detail  string        // what to do about it
}

func (e *SignatureError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v", e.File, e.Kind)
	if e.Key != "" {
		fmt.Fprintf(&b, " (key %s)", e.Key)
	}
	if e.Kind == ErrAltered {
		switch {
		case len(e.Changes) > 0:
			b.WriteString("; differs from what was signed at:")
			for i, c := range e.Changes {
				if i == maxChangesListed {
					fmt.Fprintf(&b, "\n  ... and %d more", len(e.Changes)-i)
					break
				}
				b.WriteString("\n  " + c.String())
			}
		default:
			b.WriteString("; no recorded field digest locates the change (signed by an older klock, or the digests were edited too), so only the whole document is known to differ")
		}
	}
	if e.Detail != "" {
		b.WriteString("\n" + e.Detail)
	}
	return b.String()
}

// Unwrap lets errors.Is match both ErrSignature and the kind.
func (e *SignatureError) Unwrap() []error { return []error{ErrSignature, e.Kind} }
