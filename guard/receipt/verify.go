package receipt

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"

	"github.com/gowebpki/jcs"
	"github.com/klocklabs/klock/internal/hashchain"
)

// Summary is what a verified chain holds.
type Summary struct {
	Receipts  uint64
	KernelKey string
	Head      hashchain.Head
}

// Verify checks every receipt of a chain offline: its JSON, its signature,
// that its seq matches its position, that every receipt is signed by the
// same key (the trusted one when given), the hash links, and that each
// decision agrees with its evidence (CheckEvidence). Each decoded
// receipt is passed to each (may be nil) in order.
func Verify(r io.Reader, trusted ed25519.PublicKey, each func(*Receipt) error) (Summary, error) {
	var s Summary
	roots := map[string]bool{} // batch roots whose signature verified
	head, err := hashchain.VerifyWith(r, Linker, func(seq uint64, line []byte) error {
		rc, err := Decode(line)
		if err != nil {
			return err
		}
		// A line is the canonical JSON of the signed receipt: any other
		// spelling of the same data (JSON has several, e.g. \u0041 and A)
		// is rejected, so no byte can change without failing verification.
		if canon, err := jcs.Transform(line); err != nil || !bytes.Equal(canon, line) {
			return fmt.Errorf("%w: receipt %d is not in RFC 8785 canonical form", ErrMalformed, seq)
		}
		if rc.Seq != seq {
			return fmt.Errorf("%w: receipt seq %d at position %d", ErrMalformed, rc.Seq, seq)
		}
		if s.KernelKey == "" {
			s.KernelKey = rc.KernelKey
		} else if rc.KernelKey != s.KernelKey {
			return fmt.Errorf("%w: receipt %d is signed by %s, the chain by %s", ErrSignature, seq, rc.KernelKey, s.KernelKey)
		}
		pub, sig, err := keyAndSig(rc, trusted)
		if err != nil {
			return err
		}
		if err := checkLine(pub, line, sig, rc, roots); err != nil {
			return err
		}
		if err := CheckEvidence(rc); err != nil {
			return err
		}
		if each != nil {
			return each(rc)
		}
		return nil
	})
	s.Head, s.Receipts = head, head.Seq
	return s, err
}

// VerifyFile is Verify on the file at path.
func VerifyFile(path string, trusted ed25519.PublicKey, each func(*Receipt) error) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	return Verify(f, trusted, each)
}

// checkLine verifies one canonical line's signature: over the line without
// it, or, for a receipt signed in a batch, over its batch's Merkle root
// that the line's leaf and proof hash up to.
func checkLine(pub ed25519.PublicKey, line, sig []byte, rc *Receipt, roots map[string]bool) error {
	if rc.Proof != nil {
		leaf, ok := leafPart(line)
		if !ok {
			return fmt.Errorf("%w: receipt %d has a proof but no signature member", ErrMalformed, rc.Seq)
		}
		return checkProof(pub, leaf, rc.Proof, sig, rc, roots)
	}
	msg, ok := signedPart(line)
	if !ok {
		return fmt.Errorf("%w: receipt %d has no signature member", ErrMalformed, rc.Seq)
	}
	return verifySig(pub, msg, sig, rc)
}
