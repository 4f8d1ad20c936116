package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/gowebpki/jcs"
	"github.com/klocklabs/klock/policy"
)

// Signing a chained receipt has a parallel part and a sequential part. The
// canonical JSON of everything but seq, prev and signature does not depend
// on the chain (Prepare, run concurrently); seq and prev do, and the
// signature covers them (Log.AppendPrepared, one at a time). Because RFC
// 8785 sorts members by name and the three chain-owned members are plain
// ASCII scalars, adding them to a canonical object is inserting them at
// their sorted place, just before "time", which every receipt has and after
// which only scalar members follow (so the last `,"time":"` in the bytes is
// the top-level one: an unescaped quote cannot occur inside a JSON string).
var timeMember = []byte(`,"time":"`)

// Prepared is a receipt's canonical JSON without its chain members.
type Prepared struct {
	canon []byte
	at    int // where seq, prev and signature go
}

// Body is the canonical JSON of the receipt without its chain members (seq,
// prev, signature): what the budget ledger stores for each event. It
// decodes (json.Unmarshal) to the receipt it was prepared from. Callers must
// not modify it.
func (p *Prepared) Body() []byte { return p.canon }

// Prepare canonicalizes r (with kernel_key set for priv) for AppendPrepared.
func Prepare(r *Receipt, priv ed25519.PrivateKey) (*Prepared, error) {
	c := *r
	c.KernelKey = policy.FormatPublicKey(priv.Public().(ed25519.PublicKey))
	return prepare(c)
}

// marshalCopies holds the receipt copies prepare marshals. Marshalling a
// copy made on the stack moved it to the heap, a fifth of what preparing
// a budget receipt allocated (and the budget ledger prepares tens of
// thousands a second, on two cores where every garbage collection takes
// CPU from the decisions callers wait on).
var marshalCopies = sync.Pool{New: func() any { return new(Receipt) }}

func prepare(r Receipt) (*Prepared, error) {
	c := marshalCopies.Get().(*Receipt)
	defer func() {
		*c = Receipt{} // keep nothing of r alive in the pool
		marshalCopies.Put(c)
	}()
	*c = r
	c.Seq, c.Prev, c.Signature, c.Proof = 0, "", "", nil // omitted: the chain adds them
	if c.Time == "" {
		return nil, fmt.Errorf("%w: receipt %q has no time", ErrMalformed, c.ID)
	}
	js, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	canon := js
	if !alreadyCanonical(c, js) {
		if canon, err = jcs.Transform(js); err != nil {
			return nil, fmt.Errorf("%w: canonicalize: %v", ErrMalformed, err)
		}
	}
	at := bytes.LastIndex(canon, timeMember)
	if at < 0 {
		return nil, fmt.Errorf("%w: canonical receipt has no top-level time", ErrMalformed)
	}
	return &Prepared{canon: canon, at: at}, nil
}

// alreadyCanonical reports whether encoding/json's output for c is already
// its RFC 8785 form, so the costly re-canonicalization can be skipped. It
// is when: every struct declares its members in sorted order (receipt.go
// does, and TestStructMembersAreSorted keeps it so), every number is an
// integer, no string needed an escape (no backslash in the output: Go
// escapes <, > and & where JCS does not) or holds a non-ASCII byte, and
// there is no embedded raw JSON (parameters, cost breakdown) of unknown
// form. Verify re-canonicalizes every line with jcs, so a mistake here
// would show as receipts that do not verify, never as a weaker check.
func alreadyCanonical(c *Receipt, js []byte) bool {
	if c.Action.Parameters != nil || (c.Metadata.Financial != nil && c.Metadata.Financial.CostBreakdown != nil) {
		return false
	}
	for _, b := range js {
		if b == '\\' || b >= 0x80 {
			return false
		}
	}
	return true
}

// chained returns the canonical bytes with seq and prev inserted (what the
// signature covers) and, when sig is set, with the signature too (the line).
func (p *Prepared) chained(seq uint64, prev, sig string) []byte {
	return p.appendChained(make([]byte, 0, len(p.canon)+200), seq, prev, sig)
}

// appendChained appends chained(seq, prev, sig) to b.
func (p *Prepared) appendChained(b []byte, seq uint64, prev, sig string) []byte {
	b = append(b, p.canon[:p.at]...)
	b = append(b, `,"prev":"`...)
	b = append(b, prev...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	if sig != "" {
		b = append(b, `,"signature":"`...)
		b = append(b, sig...)
		b = append(b, '"')
	}
	return append(b, p.canon[p.at:]...)
}

// appendProved appends the line of a receipt signed in a batch to b: the
// leaf bytes (chained without signature) with proof and signature
// inserted at their sorted places, after prev and around seq.
func (p *Prepared) appendProved(b, leaf, proof []byte, sig string) []byte {
	seqAt := bytes.LastIndex(leaf[:len(leaf)-(len(p.canon)-p.at)], []byte(`,"seq":`))
	b = append(b, leaf[:seqAt]...)
	b = append(b, `,"proof":`...)
	b = append(b, proof...)
	tail := len(leaf) - (len(p.canon) - p.at)
	b = append(b, leaf[seqAt:tail]...)
	b = append(b, `,"signature":"`...)
	b = append(b, sig...)
	b = append(b, '"')
	return append(b, leaf[tail:]...)
}

// appendProof renders a proof's canonical JSON (members sorted, hex and
// integers need no escaping).
func appendProof(b []byte, index, size uint64, path [][32]byte, root [32]byte) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendUint(b, index, 10)
	b = append(b, `,"path":[`...)
	for i, h := range path {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = hex.AppendEncode(b, h[:])
		b = append(b, '"')
	}
	b = append(b, `],"root":"`...)
	b = hex.AppendEncode(b, root[:])
	b = append(b, `","size":`...)
	b = strconv.AppendUint(b, size, 10)
	return append(b, '}')
}

// proofMember is how a batch-signed line's top-level proof starts. Only
// scalars (seq, signature, time, timestamp, tool_name, tool_server) follow
// "proof" in a canonical receipt and the proof holds no object, so the
// last occurrence in a line is the top-level one (as for the signature).
var proofMember = []byte(`,"proof":{`)

// leafPart removes the proof and signature members from a canonical line,
// giving a batch-signed receipt's leaf bytes; ok is false when the line
// has no proof (a receipt signed alone).
func leafPart(line []byte) (leaf []byte, ok bool) {
	i := bytes.LastIndex(line, proofMember)
	if i < 0 {
		return nil, false
	}
	j := bytes.IndexByte(line[i:], '}')
	if j < 0 {
		return nil, false
	}
	rest, ok := signedPart(line[i+j+1:])
	if !ok {
		return nil, false
	}
	return append(append(make([]byte, 0, len(line)), line[:i]...), rest...), true
}

// Linker is the receipt chain's link rule (hashchain.WithLinker): the
// next receipt's prev hashes a batch-signed receipt's leaf bytes, and a
// receipt signed alone whole.
func Linker(line []byte) ([]byte, error) {
	if leaf, ok := leafPart(line); ok {
		return leaf, nil
	}
	return line, nil
}

// signedPart removes the signature member from a canonical line, giving
// the bytes the signature covers.
func signedPart(line []byte) ([]byte, bool) {
	i := bytes.LastIndex(line, []byte(`,"signature":"`))
	if i < 0 {
		return nil, false
	}
	j := bytes.IndexByte(line[i+len(`,"signature":"`):], '"')
	if j < 0 {
		return nil, false
	}
	end := i + len(`,"signature":"`) + j + 1
	out := make([]byte, 0, len(line)-(end-i))
	return append(append(out, line[:i]...), line[end:]...), true
}

func encodeSig(sig []byte) string { return sigPrefix + base64.StdEncoding.EncodeToString(sig) }
