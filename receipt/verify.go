package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"

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
// same key (the trusted one when given), and the hash links. Each decoded
// receipt is passed to each (may be nil) in order.
func Verify(r io.Reader, trusted ed25519.PublicKey, each func(*Receipt) error) (Summary, error) {
	var s Summary
	head, err := hashchain.Verify(r, func(seq uint64, line []byte) error {
		rc, err := Decode(line)
		if err != nil {
			return err
		}
		// Only the encoding Log writes is accepted, so that no byte of a
		// receipt can change without changing what verifies (JSON allows
		// several spellings of one string, e.g. \u0041 and A).
		if again, err := json.Marshal(rc); err != nil || !bytes.Equal(again, line) {
			return fmt.Errorf("%w: receipt %d is not in the encoding klock writes", ErrMalformed, seq)
		}
		if rc.Seq != seq {
			return fmt.Errorf("%w: receipt seq %d at position %d", ErrMalformed, rc.Seq, seq)
		}
		if s.KernelKey == "" {
			s.KernelKey = rc.KernelKey
		} else if rc.KernelKey != s.KernelKey {
			return fmt.Errorf("%w: receipt %d is signed by %s, the chain by %s", ErrSignature, seq, rc.KernelKey, s.KernelKey)
		}
		if err := Check(rc, trusted); err != nil {
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
