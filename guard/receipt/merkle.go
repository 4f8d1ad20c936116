package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// A batch of receipts appended together (Log.AppendBatch) carries one
// ed25519 signature instead of one per receipt: the signature covers the
// Merkle root of the batch's leaves, and each receipt carries its
// inclusion proof ("proof": index, size, path, root), so that it verifies
// alone: leaf -> path -> root, then the root's signature.
//
// The tree is RFC 6962's (section 2.1, as in RFC 9162 section 2.1.1):
// a leaf is SHA-256(0x00 || leaf bytes) and an interior node
// SHA-256(0x01 || left || right), and a tree of n leaves splits at the
// largest power of two below n, so odd sizes need no padding. The distinct
// 0x00/0x01 prefixes are the domain separation that stops a second-preimage
// attack: without them an interior node's 64 input bytes could be passed
// off as a leaf, proving a "receipt" that was never signed.
//
// The leaf bytes are the receipt's canonical JSON without "proof" and
// "signature": exactly what a single-signature receipt's signature covers
// (seq and prev included). The next receipt's prev is the SHA-256 of those
// same bytes (not of the whole line, which holds the root and so could not
// be known before the batch's last receipt is linked); old receipts keep
// prev = SHA-256 of the whole line (Linker).

// ErrProof is wrapped by every inclusion-proof failure: a leaf, path or
// root that does not hash up to the signed root.
var ErrProof = errors.New("receipt inclusion proof does not verify")

// Proof is a receipt's place in its signed batch.
type Proof struct {
	Index uint64   `json:"index"`
	Path  []string `json:"path"` // sibling hashes, leaf level first, hex
	Root  string   `json:"root"` // hex Merkle root the signature covers
	Size  uint64   `json:"size"` // leaves in the batch
}

// rootDomain prefixes the signed root so that a batch signature can never
// be taken for a single receipt's signature (which covers a JSON object,
// starting with '{') or any other message signed with the kernel key.
const rootDomain = "klock receipt batch root v1\x00"

// rootMessage is what a batch's signature covers: the domain, the tree
// size (big-endian u64) and the root.
func rootMessage(root []byte, size uint64) []byte {
	m := make([]byte, 0, len(rootDomain)+8+len(root))
	m = append(m, rootDomain...)
	m = binary.BigEndian.AppendUint64(m, size)
	return append(m, root...)
}

// LeafHash is SHA-256(0x00 || leaf).
func LeafHash(leaf []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte{0x00})
	h.Write(leaf)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func nodeHash(l, r []byte) [32]byte {
	var buf [65]byte
	buf[0] = 0x01
	copy(buf[1:], l)
	copy(buf[33:], r)
	return sha256.Sum256(buf[:])
}

// split is RFC 6962's k: the largest power of two smaller than n (n > 1).
func split(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// MerkleTree returns the root of leaves (leaf hashes) and each leaf's
// inclusion path, leaf level first.
func MerkleTree(leaves [][32]byte) ([32]byte, [][][32]byte) {
	return new(treeScratch).tree(leaves)
}

// treeScratch holds a tree's paths; the receipt log keeps one from batch
// to batch so that the paths are not allocated afresh every time.
type treeScratch struct {
	paths   [][][32]byte
	backing [][32]byte
}

// tree is MerkleTree building the paths in t (valid until the next call).
// A path is at most ceil(log2 n) long, so one backing array holds every
// path and subtree's appends never reallocate.
func (t *treeScratch) tree(leaves [][32]byte) ([32]byte, [][][32]byte) {
	depth := 0
	if len(leaves) > 1 {
		depth = bits.Len(uint(len(leaves) - 1))
	}
	t.paths = slices.Grow(t.paths[:0], len(leaves))[:len(leaves)]
	t.backing = slices.Grow(t.backing[:0], len(leaves)*depth)[:len(leaves)*depth]
	for i := range t.paths {
		t.paths[i] = t.backing[i*depth : i*depth : (i+1)*depth]
	}
	return subtree(leaves, t.paths), t.paths
}

func subtree(leaves [][32]byte, paths [][][32]byte) [32]byte {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := split(len(leaves))
	l := subtree(leaves[:k], paths[:k])
	r := subtree(leaves[k:], paths[k:])
	for i := range paths[:k] {
		paths[i] = append(paths[i], r)
	}
	for i := range paths[k:] {
		paths[k+i] = append(paths[k+i], l)
	}
	return nodeHash(l[:], r[:])
}

// RootFromPath recomputes the root from a leaf hash and its inclusion path
// (RFC 9162 section 2.1.3.2), or fails with ErrProof when the index, size
// and path length do not fit together.
func RootFromPath(leaf [32]byte, index, size uint64, path [][32]byte) ([32]byte, error) {
	if index >= size {
		return leaf, fmt.Errorf("%w: index %d outside a batch of %d", ErrProof, index, size)
	}
	fn, sn := index, size-1
	r := leaf
	for _, p := range path {
		if sn == 0 {
			return r, fmt.Errorf("%w: path longer than a batch of %d needs", ErrProof, size)
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p[:], r[:])
			for fn&1 == 0 && fn != 0 {
				fn, sn = fn>>1, sn>>1
			}
		} else {
			r = nodeHash(r[:], p[:])
		}
		fn, sn = fn>>1, sn>>1
	}
	if sn != 0 {
		return r, fmt.Errorf("%w: path shorter than a batch of %d needs", ErrProof, size)
	}
	return r, nil
}

// checkProof verifies that leaf (the bytes without proof and signature)
// is in the batch p describes and that the batch root is signed by pub.
// verified caches roots whose signature has been checked (may be nil).
func checkProof(pub ed25519.PublicKey, leaf []byte, p *Proof, sig []byte, r *Receipt, verified map[string]bool) error {
	path := make([][32]byte, len(p.Path))
	for i, s := range p.Path {
		if err := decodeHash(s, path[i][:]); err != nil {
			return fmt.Errorf("%w: receipt %s (seq %d): path[%d]: %v", ErrMalformed, r.ID, r.Seq, i, err)
		}
	}
	var want [32]byte
	if err := decodeHash(p.Root, want[:]); err != nil {
		return fmt.Errorf("%w: receipt %s (seq %d): root: %v", ErrMalformed, r.ID, r.Seq, err)
	}
	got, err := RootFromPath(LeafHash(leaf), p.Index, p.Size, path)
	if err != nil {
		return fmt.Errorf("receipt %s (seq %d): %w", r.ID, r.Seq, err)
	}
	if !bytes.Equal(got[:], want[:]) {
		return fmt.Errorf("%w: receipt %s (seq %d) does not hash up to its batch root %.16s…", ErrProof, r.ID, r.Seq, p.Root)
	}
	key := fmt.Sprintf("%s/%d/%x", p.Root, p.Size, sig)
	if verified[key] {
		return nil
	}
	if !ed25519.Verify(pub, rootMessage(want[:], p.Size), sig) {
		return fmt.Errorf("%w: the batch root of receipt %s (seq %d) is not signed by %s", ErrSignature, r.ID, r.Seq, r.KernelKey)
	}
	if verified != nil {
		verified[key] = true
	}
	return nil
}

// decodeHash reads a lowercase hex SHA-256. Only lowercase: hex.Decode
// also takes "AB" for "ab", and a proof whose bytes could change without
// changing what it proves would let a receipt line be altered unseen.
func decodeHash(s string, out []byte) error {
	if len(s) != 2*sha256.Size {
		return fmt.Errorf("%q is not a hex SHA-256", s)
	}
	if _, err := hex.Decode(out, []byte(s)); err != nil {
		return err
	}
	if hex.EncodeToString(out) != s {
		return fmt.Errorf("%q is not lowercase hex", s)
	}
	return nil
}
