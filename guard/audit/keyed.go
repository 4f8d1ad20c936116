package audit

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gowebpki/jcs"
)

// Confidential mode (seed 004 §11) keeps no plaintext, and a plain SHA-256
// of a value would leak it anyway: an account number, an amount, a
// customer id are guessed and hashed in milliseconds. So every digest the
// gateway keeps of a confidential value is an HMAC-SHA256 under a secret
// of the deployment: equal values stay comparable across records and
// restarts, and nobody without the key can test a guess.

// KeyFile is the name of the per-deployment secret beside the state.
const KeyFile = "audit.key"

// keyLen is the secret's length in bytes.
const keyLen = 32

// DigestPrefix marks a keyed digest, so no reader takes it for a SHA-256.
const DigestPrefix = "hmac-sha256:"

// ErrKey: the deployment's audit key cannot be read or made.
var ErrKey = errors.New("audit key unusable")

// LoadKey reads the secret at path, making it (32 random bytes, mode 0600)
// when the file does not exist. A key file anyone but its owner can read
// is refused: it would let them test guesses against every digest.
func LoadKey(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		k := make([]byte, keyLen)
		if _, err := rand.Read(k); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %v", ErrKey, err)
		}
		_, werr := f.Write(k)
		serr := f.Sync()
		if cerr := f.Close(); werr == nil && serr == nil && cerr == nil {
			return k, nil
		} else {
			os.Remove(path)
			return nil, fmt.Errorf("%w: writing %s: %v", ErrKey, path, errors.Join(werr, serr, cerr))
		}
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v): chmod 600 it, or remove it to start a new key", ErrKey, path, st.Mode().Perm())
	}
	k, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrKey, err)
	}
	if len(k) < keyLen {
		return nil, fmt.Errorf("%w: %s holds %d bytes, want %d: remove it to start a new key", ErrKey, path, len(k), keyLen)
	}
	return k, nil
}

// Hasher computes keyed digests of values.
type Hasher struct{ key []byte }

// NewHasher returns a hasher under key.
func NewHasher(key []byte) *Hasher { return &Hasher{key: append([]byte(nil), key...)} }

// Digest is the HMAC-SHA256 of v's RFC 8785 canonical JSON, prefixed
// hmac-sha256:.
func (h *Hasher) Digest(v any) string {
	raw, err := json.Marshal(v)
	if err == nil {
		if c, err2 := jcs.Transform(raw); err2 == nil {
			raw = c
		}
	}
	m := hmac.New(sha256.New, h.key)
	m.Write(raw)
	return DigestPrefix + hex.EncodeToString(m.Sum(nil))
}
