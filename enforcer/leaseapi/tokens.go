package leaseapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"
)

// minTokenLen: a bearer token shorter than this is guessable.
const minTokenLen = 16

// Tokens are the API's bearer tokens on TCP, each naming its tenant.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	hash   [sha256.Size]byte
	tenant string
	admin  bool
}

// LoadTokens reads a tokens file: one "TENANT TOKEN" per line, optionally
// followed by "admin" (that tenant sees and may free every lease); blank
// lines and lines starting with # are ignored. A tenant may have several
// tokens (rotation); a token names one tenant. The file holds secrets: it
// is refused when its group or others may read or write it.
func LoadTokens(path string) (*Tokens, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: tokens file: %v", ErrConfig, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: tokens file %s is mode %o: it holds secrets, make it 0600 (chmod 600 %s)", ErrConfig, path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: tokens file: %v", ErrConfig, err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%w: tokens file %s: %v", ErrConfig, path, err)
	}
	return t, nil
}

// ParseTokens reads the tokens file format (see LoadTokens).
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 || (len(f) == 3 && f[2] != "admin") {
			return nil, fmt.Errorf("line %d: want \"TENANT TOKEN\" or \"TENANT TOKEN admin\"", n)
		}
		if e := checkID("tenant", f[0]); e != nil {
			return nil, fmt.Errorf("line %d: tenant %s", n, e.Message)
		}
		if len(f[1]) < minTokenLen {
			return nil, fmt.Errorf("line %d: the token of %s is shorter than %d characters", n, f[0], minTokenLen)
		}
		h := sha256.Sum256([]byte(f[1]))
		if seen[h] {
			return nil, fmt.Errorf("line %d: a token may name one tenant only (this one is already listed)", n)
		}
		seen[h] = true
		t.entries = append(t.entries, tokenEntry{hash: h, tenant: f[0], admin: len(f) == 3})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	return t, nil
}

// lookup finds token's entry. It compares the token's hash with every
// entry in constant time and never stops early, so the time taken says
// nothing about which token, or how much of one, matched.
func (t *Tokens) lookup(token string) (tokenEntry, bool) {
	h := sha256.Sum256([]byte(token))
	var (
		found tokenEntry
		hit   int
	)
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			found, hit = e, 1
		}
	}
	return found, hit == 1
}
