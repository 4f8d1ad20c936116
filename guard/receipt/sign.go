package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/klocklabs/klock/policy"
)

// Sentinel errors.
var (
	ErrSignature = errors.New("receipt signature does not verify")
	ErrMalformed = errors.New("malformed receipt")
)

const sigPrefix = "ed25519:"

// Canonical returns the bytes a receipt's signature covers: the RFC 8785
// canonical JSON of the receipt without its signature member (and, for a
// receipt signed in a batch, without its proof: its Merkle leaf).
func Canonical(r *Receipt) ([]byte, error) {
	p, err := prepare(*r)
	if err != nil {
		return nil, err
	}
	return p.chained(r.Seq, r.Prev, ""), nil
}

// Sign sets r's kernel_key and signature.
func Sign(r *Receipt, priv ed25519.PrivateKey) error {
	r.KernelKey = policy.FormatPublicKey(priv.Public().(ed25519.PublicKey))
	msg, err := Canonical(r)
	if err != nil {
		return err
	}
	r.Signature = encodeSig(ed25519.Sign(priv, msg))
	return nil
}

// Check verifies r's signature (for a receipt signed in a batch: that it
// hashes up to its batch root, and the root's signature) with its own kernel_key and, when trusted is
// not nil, that the key is the trusted one.
func Check(r *Receipt, trusted ed25519.PublicKey) error {
	pub, sig, err := keyAndSig(r, trusted)
	if err != nil {
		return err
	}
	msg, err := Canonical(r)
	if err != nil {
		return err
	}
	if r.Proof != nil {
		return checkProof(pub, msg, r.Proof, sig, r, nil)
	}
	return verifySig(pub, msg, sig, r)
}

func verifySig(pub ed25519.PublicKey, msg, sig []byte, r *Receipt) error {
	if !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("%w: receipt %s (seq %d) was altered after signing", ErrSignature, r.ID, r.Seq)
	}
	return nil
}

// Decode parses one receipt line strictly: unknown fields, trailing data
// and a missing signature are errors.
func Decode(line []byte) (*Receipt, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r Receipt
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the receipt object", ErrMalformed)
	}
	if r.Signature == "" || r.KernelKey == "" {
		return nil, fmt.Errorf("%w: receipt %q has no signature or kernel_key", ErrMalformed, r.ID)
	}
	return &r, nil
}

func keyAndSig(r *Receipt, trusted ed25519.PublicKey) (ed25519.PublicKey, []byte, error) {
	pub, err := policy.ParsePublicKey([]byte(r.KernelKey))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: kernel_key: %v", ErrMalformed, err)
	}
	if trusted != nil && !pub.Equal(trusted) {
		return nil, nil, fmt.Errorf("%w: signed by %s, not by the trusted key %s", ErrSignature, r.KernelKey, policy.FormatPublicKey(trusted))
	}
	raw, ok := bytes.CutPrefix([]byte(r.Signature), []byte(sigPrefix))
	if !ok {
		return nil, nil, fmt.Errorf("%w: signature %q does not start with %q", ErrMalformed, r.Signature, sigPrefix)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(string(raw))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, nil, fmt.Errorf("%w: signature is not base64 of %d bytes", ErrMalformed, ed25519.SignatureSize)
	}
	return pub, sig, nil
}
