package trust

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// DefaultDir holds the host's trust roots, one ed25519 public key per
// *.pub file (klock keygen writes them).
const DefaultDir = "/etc/klock/trust"

// ErrRoots: the trust roots could not be read or are unsafe.
var ErrRoots = errors.New("trust roots")

// Root is one trusted key and where it came from.
type Root struct {
	Key  ed25519.PublicKey
	From string // the .pub file, or "--trust"
}

// Roots are the keys a manifest's signature must come from.
type Roots struct{ roots []Root }

// LoadRoots reads every *.pub in dir (missing: none) and each of keys (a
// .pub file, or ed25519:<base64> inline).
func LoadRoots(dir string, keys []string) (*Roots, error) {
	r := &Roots{}
	if dir != "" {
		files, err := filepath.Glob(filepath.Join(dir, "*.pub"))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRoots, err)
		}
		sort.Strings(files)
		for _, f := range files {
			if err := r.addFile(f); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "ed25519:") {
			pub, err := policy.ParsePublicKey([]byte(k))
			if err != nil {
				return nil, fmt.Errorf("%w: --trust %s: %w", ErrRoots, k, err)
			}
			r.roots = append(r.roots, Root{Key: pub, From: "--trust"})
			continue
		}
		if err := r.addFile(k); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Roots) addFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s does not exist (a trust root is a .pub file from klock keygen, or ed25519:<base64>)", ErrRoots, path)
		}
		return fmt.Errorf("%w: %w", ErrRoots, err)
	}
	// Whoever can rewrite a root can make any manifest trusted.
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %v), so anyone could replace the key: chmod go-w %s", ErrRoots, path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRoots, err)
	}
	pub, err := policy.ParsePublicKey(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRoots, path, err)
	}
	r.roots = append(r.roots, Root{Key: pub, From: path})
	return nil
}

// Len is the number of roots.
func (r *Roots) Len() int { return len(r.roots) }

// Find returns the root holding pub.
func (r *Roots) Find(pub ed25519.PublicKey) (Root, bool) {
	for _, x := range r.roots {
		if x.Key.Equal(pub) {
			return x, true
		}
	}
	return Root{}, false
}

// String lists the roots for a message: "none" or key (from), ...
func (r *Roots) String() string {
	if len(r.roots) == 0 {
		return "none"
	}
	var parts []string
	for _, x := range r.roots {
		parts = append(parts, policy.FormatPublicKey(x.Key)+" ("+x.From+")")
	}
	return strings.Join(parts, ", ")
}
