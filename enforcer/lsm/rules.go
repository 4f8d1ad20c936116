//go:build linux

package lsm

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/klocklabs/klock/policy"
)

// Rules is a ruleset's FILE and PROC rules compiled into the entries of a
// path-rules LPM trie (struct klsm_key -> struct klsm_rule, see
// bpf/include/lsm.h and pathrule.h). bpf-lsm looks every object up in one;
// enforcer/unixguard looks AF_UNIX socket names up in its own, built from
// the same Rules, so both decide a path alike.
type Rules struct{ entries []entry }

// CompileRules compiles rs. A rule too long for a key is a *TooLongError
// (errors.Is ErrUnsupported).
func CompileRules(rs *policy.Ruleset) (Rules, error) {
	e, err := compile(rs)
	return Rules{e}, err
}

// Access bits of a rule (struct klsm_rule's direct and deeper): bit i is
// policy.Predicate i; AccessExec is PROVIDES PROC.
const AccessExec = accExec

// Grants is what the rules grant path, as the kernel's lookup decides it
// (for tests and tools; the kernel never calls it).
func (r Rules) Grants(path string) uint8 { return lookup(r.entries, path) }

// Len is the number of entries.
func (r Rules) Len() int { return len(r.entries) }

// Write puts every entry into m (an LPM trie of klsm_key -> klsm_rule)
// under the rules id sess.
func (r Rules) Write(m *ebpf.Map, sess uint32) error {
	for _, e := range r.entries {
		v := lsmKlsmRule{Direct: e.direct, Deeper: e.deeper, Kind: e.kind, Keylen: uint16(len(e.key))}
		if err := m.Update(key(sess, e), v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write rule %q: %w", e.key, err)
		}
	}
	return nil
}

// Delete removes every entry Write put into m under sess (entries already
// gone are no error).
func (r Rules) Delete(m *ebpf.Map, sess uint32) error {
	var errs []error
	for _, e := range r.entries {
		if err := m.Delete(key(sess, e)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func key(sess uint32, e entry) lsmKlsmKey {
	k := lsmKlsmKey{Prefixlen: uint32(32 + 8*len(e.key)), Sess: sess}
	copy(k.Path[:], e.key)
	return k
}
