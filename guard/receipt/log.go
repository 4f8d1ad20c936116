package receipt

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"

	"github.com/klocklabs/klock/internal/hashchain"
	"github.com/klocklabs/klock/policy"
)

// Log appends signed receipts to one hash-chained JSONL file. It is safe
// for concurrent use (appends serialize on the chain's lock).
type Log struct {
	w     *hashchain.Writer
	priv  ed25519.PrivateKey
	last  *Receipt // the receipt at the head when the log was opened
	keyID string   // priv's public key as receipts name it (kernel_key)

	scratch batchScratch // batchLines' buffers (under the chain's lock)
}

// LogOption configures OpenLog.
type LogOption func(*logConfig)

type logConfig struct{ chain []hashchain.Option }

// WithoutSync leaves fsync to the caller (Sync): the budget ledger is the
// durable record and re-emits receipts lost with the page cache, so the
// group-commit path syncs the log once per batch instead of per receipt.
func WithoutSync() LogOption {
	return func(c *logConfig) { c.chain = append(c.chain, hashchain.WithoutSync()) }
}

// OpenLog opens (creating) the receipt chain at path, signing with priv. A
// torn last line from a crash is cut off; a chain that does not verify is
// an error (it must be looked at, not appended to).
func OpenLog(path string, priv ed25519.PrivateKey, opts ...LogOption) (*Log, error) {
	var c logConfig
	for _, o := range opts {
		o(&c)
	}
	w, err := hashchain.Open(path, append(c.chain, hashchain.WithLinker(Linker))...)
	if err != nil {
		return nil, fmt.Errorf("open receipt log: %w", err)
	}
	l := &Log{w: w, priv: priv, keyID: policy.FormatPublicKey(priv.Public().(ed25519.PublicKey))}
	if w.Head().Seq > 0 {
		line, err := lastLine(path)
		if err != nil {
			w.Close()
			return nil, err
		}
		if l.last, err = Decode(line); err != nil {
			w.Close()
			return nil, fmt.Errorf("receipt log %s: last receipt: %w", path, err)
		}
	}
	return l, nil
}

// Last returns the receipt at the head when the log was opened (nil if it
// was empty); the budget ledger resumes re-emitting after its ledger_event.
func (l *Log) Last() *Receipt { return l.last }

// Append links, signs and writes r, setting its seq, prev, kernel_key and
// signature, and returns the line written.
func (l *Log) Append(r *Receipt) ([]byte, error) {
	p, err := Prepare(r, l.priv)
	if err != nil {
		return nil, err
	}
	line, err := l.AppendPrepared(p)
	if err != nil {
		return nil, err
	}
	d, err := Decode(line)
	if err != nil {
		return nil, err
	}
	*r = *d
	return line, nil
}

// AppendPrepared links, signs and writes a prepared receipt. The line is the
// canonical JSON of the whole signed receipt.
func (l *Log) AppendPrepared(p *Prepared) ([]byte, error) {
	var line []byte
	_, err := l.w.Append(func(h hashchain.Head) ([]byte, error) {
		sig := ed25519.Sign(l.priv, p.chained(h.Next(), h.Hash, ""))
		line = p.chained(h.Next(), h.Hash, encodeSig(sig))
		return line, nil
	})
	return line, err
}

// AppendBatch links and writes prepared receipts in order with one write
// (and, unless WithoutSync, one fsync), returning the chain head after
// them. Either all are written or none is. The batch is signed once: the
// signature covers the Merkle root of the receipts' leaves and each line
// carries its inclusion proof (merkle.go), so it still verifies alone. A
// batch of one is signed the same way (its root is its leaf hash), so
// that what a receipt links and is signed over never depends on how
// receipts were batched: the budget ledger re-emits a lost tail in other
// batches and gets the same leaves.
func (l *Log) AppendBatch(ps []*Prepared) (hashchain.Head, error) {
	// batchLines links the lines and hashes each one's leaf part, which is
	// what the chain's Linker would hash again: the writer takes its head
	// (TestAppendBatchVerifies checks the chain against VerifyWith).
	return l.w.AppendLinked(func(h hashchain.Head) (hashchain.Linked, error) {
		lines, head := l.batchLines(ps, h)
		return hashchain.Linked{Lines: lines, Head: head}, nil
	})
}

// batchScratch is what batchLines builds a batch in, kept for the next
// one: the leaves and lines of a batch are garbage as soon as the chain
// writer has copied them, and allocating them afresh was over a third of
// the budget ledger's allocations, so of its garbage collections. Only
// batchLines touches it, and only under the chain writer's lock (it runs
// inside AppendLinked's build).
type batchScratch struct {
	leaves, lines []byte
	leafAt        []int // leaf i is leaves[leafAt[i]:leafAt[i+1]]
	lineAt        []int
	hashes        [][32]byte
	tree          treeScratch
	out           [][]byte
}

// batchLines links ps after h and signs them once, over the batch's
// Merkle root. It returns the lines (valid until the next call) and the
// chain head after them.
func (l *Log) batchLines(ps []*Prepared, h hashchain.Head) ([][]byte, hashchain.Head) {
	sc := &l.scratch
	sc.leaves, sc.lines = sc.leaves[:0], sc.lines[:0]
	sc.leafAt, sc.lineAt = append(sc.leafAt[:0], 0), append(sc.lineAt[:0], 0)
	sc.hashes = sc.hashes[:0]
	for _, p := range ps {
		start := len(sc.leaves)
		sc.leaves = p.appendChained(sc.leaves, h.Next(), h.Hash, "")
		leaf := sc.leaves[start:]
		sc.leafAt = append(sc.leafAt, len(sc.leaves))
		sc.hashes = append(sc.hashes, LeafHash(leaf))
		h = hashchain.Head{Seq: h.Next(), Hash: hashchain.Sum(leaf)}
	}
	root, paths := sc.tree.tree(sc.hashes)
	sig := encodeSig(ed25519.Sign(l.priv, rootMessage(root[:], uint64(len(ps)))))
	var proof []byte
	for i, p := range ps {
		proof = appendProof(proof[:0], uint64(i), uint64(len(ps)), paths[i], root)
		sc.lines = p.appendProved(sc.lines, sc.leaves[sc.leafAt[i]:sc.leafAt[i+1]], proof, sig)
		sc.lineAt = append(sc.lineAt, len(sc.lines))
	}
	sc.out = sc.out[:0]
	for i := range ps {
		sc.out = append(sc.out, sc.lines[sc.lineAt[i]:sc.lineAt[i+1]:sc.lineAt[i+1]])
	}
	return sc.out, h
}

// Prepare is the package's Prepare with the log's key, whose public half
// the log formats once instead of per receipt.
func (l *Log) Prepare(r *Receipt) (*Prepared, error) {
	c := *r
	c.KernelKey = l.keyID
	return prepare(c)
}

// Key is the log's signing key.
func (l *Log) Key() ed25519.PrivateKey { return l.priv }

// Sync flushes appended receipts to stable storage.
func (l *Log) Sync() error { return l.w.Sync() }

// Close closes the file.
func (l *Log) Close() error { return l.w.Close() }

// lastLine returns the last complete line of a file without reading all of it.
func lastLine(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	for chunk := int64(4096); ; chunk *= 4 {
		off := max(st.Size()-chunk, 0)
		buf := make([]byte, st.Size()-off)
		if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
			return nil, err
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			return buf[i+1:], nil
		}
		if off == 0 {
			return buf, nil
		}
	}
}
