package trust

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// Options say how strict the launch check is and where the roots are.
type Options struct {
	// RequireSigned refuses a manifest not signed by a root
	// (--require-signed; klockd --require-signed).
	RequireSigned bool
	// Keys are extra roots (--trust, repeatable): .pub files or
	// ed25519:<base64>.
	Keys []string
	// Dir holds root *.pub files; "" is DefaultDir. Tests point it
	// elsewhere; "-" reads none.
	Dir string
	// Warn receives the warning for a manifest signed by a key that is no
	// root when RequireSigned is off (nil: os.Stderr).
	Warn io.Writer
}

// Verdict is what Admit found.
type Verdict struct {
	// SignedBy is the root that signed the manifest (zero: unsigned, or
	// signed by a key that is no root, which only runs without
	// RequireSigned).
	SignedBy Root
	Signed   bool
}

// Load reads, decodes, validates and admits the manifest at path: the one
// way every entry point gets its manifest. It returns the bytes as read too
// (klock run hands them to the session and to klockd, which admits them
// again under its own policy).
func Load(path string, o Options) (*policy.Manifest, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := policy.Parse(path, data)
	if err != nil {
		return nil, nil, err
	}
	roots, err := o.roots()
	if err != nil {
		return nil, nil, err
	}
	if _, err := Admit(m, roots, o); err != nil {
		return nil, nil, err
	}
	return m, data, nil
}

func (o Options) roots() (*Roots, error) {
	dir := o.Dir
	switch dir {
	case "":
		dir = DefaultDir
	case "-":
		dir = ""
	}
	return LoadRoots(dir, o.Keys)
}

// Admitter returns Admit bound to o's roots, read once (klockd admits every
// session's manifest with it).
func (o Options) Admitter() (func(*policy.Manifest) error, error) {
	roots, err := o.roots()
	if err != nil {
		return nil, err
	}
	if o.RequireSigned && roots.Len() == 0 {
		return nil, noRoots(o)
	}
	return func(m *policy.Manifest) error { _, err := Admit(m, roots, o); return err }, nil
}

// Admit decides whether m may run under roots and o (see the package
// documentation for the rules), then checks the maintainer approval HOTL
// with an organizational tool needs.
func Admit(m *policy.Manifest, roots *Roots, o Options) (Verdict, error) {
	v, err := admitSignature(m, roots, o)
	if err != nil {
		return v, err
	}
	return v, admitApproval(m, roots, o)
}

// admitApproval: HOTL with an organizational tool needs a maintainer's
// signature by a trusted key. Without one the agent is refused when
// signatures are required, else runs HITL (every write waits for a human),
// with a warning: free text never buys HOTL.
func admitApproval(m *policy.Manifest, roots *Roots, o Options) error {
	tools := m.NeedsMaintainerApproval()
	if len(tools) == 0 {
		return nil
	}
	pub, err := m.ApprovalKey()
	if err == nil {
		if _, ok := roots.Find(pub); !ok {
			err = fmt.Errorf("%w: signed by %s, which is not trusted (trusted keys: %s; add it to %s or pass --trust)",
				policy.ErrApproval, policy.FormatPublicKey(pub), roots, rootDir(o))
		}
	}
	if err == nil {
		return nil
	}
	if o.RequireSigned {
		return fmt.Errorf("refusing HOTL for %s (organizational blast radius): %w", strings.Join(tools, ", "), err)
	}
	m.HITL.DefaultMode = policy.HITLModeHITL
	fmt.Fprintf(o.warn(), "klock: warning: running HITL, not the declared HOTL: %s has organizational blast radius and %v\n", strings.Join(tools, ", "), err)
	return nil
}

func (o Options) warn() io.Writer {
	if o.Warn == nil {
		return os.Stderr
	}
	return o.Warn
}

func admitSignature(m *policy.Manifest, roots *Roots, o Options) (Verdict, error) {
	if o.RequireSigned && roots.Len() == 0 {
		return Verdict{}, noRoots(o)
	}
	if m.Signature == nil {
		if !o.RequireSigned {
			return Verdict{}, nil
		}
		_, err := m.SignedIntact()
		return Verdict{}, refused(err)
	}
	// An altered manifest is refused whatever the policy: its signature
	// says someone else approved bytes it no longer holds.
	pub, err := m.SignedIntact()
	if err != nil {
		return Verdict{}, refused(err)
	}
	if root, ok := roots.Find(pub); ok {
		return Verdict{SignedBy: root, Signed: true}, nil
	}
	untrusted := &policy.SignatureError{File: m.File, Key: m.Signature.PublicKey, Kind: policy.ErrUntrustedKey,
		Detail: fmt.Sprintf("trusted keys: %s; add the signer's .pub to %s or pass --trust KEY.pub, or re-sign with a trusted key (klock sign -k KEY)", roots, rootDir(o))}
	if o.RequireSigned {
		return Verdict{}, refused(untrusted)
	}
	fmt.Fprintf(o.warn(), "klock: warning: %v\n  (it runs because signatures are not required here; --require-signed would refuse it)\n", untrusted)
	return Verdict{Signed: true}, nil
}

func refused(err error) error {
	var se *policy.SignatureError
	if errors.As(err, &se) {
		return fmt.Errorf("refusing the manifest: %w", err)
	}
	return err
}

func noRoots(o Options) error {
	return fmt.Errorf("%w: signatures are required but no key is trusted: put the signers' .pub files in %s (root-owned, not group/other-writable) or pass --trust KEY.pub", ErrRoots, rootDir(o))
}

func rootDir(o Options) string {
	if o.Dir == "" || o.Dir == "-" {
		return DefaultDir
	}
	return o.Dir
}
