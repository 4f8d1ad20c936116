package receipt

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"

	"github.com/klocklabs/klock/internal/hashchain"
)

// Log appends signed receipts to one hash-chained JSONL file. It is safe
// for concurrent use (appends serialize on the chain's lock).
type Log struct {
	w    *hashchain.Writer
	priv ed25519.PrivateKey
	last *Receipt // the receipt at the head when the log was opened
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
	l := &Log{w: w, priv: priv}
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
// (and, unless WithoutSync, one fsync), returning the lines. Either all are
// written or none is. The batch is signed once: the signature covers the
// Merkle root of the receipts' leaves and each line carries its inclusion
// proof (merkle.go), so it still verifies alone. A batch of one is signed
// the same way (its root is its leaf hash), so that what a receipt links
// and is signed over never depends on how receipts were batched: the
// budget ledger re-emits a lost tail in other batches and gets the same
// leaves.
func (l *Log) AppendBatch(ps []*Prepared) ([][]byte, error) {
	var lines [][]byte
	// batchLines links the lines and hashes each one's leaf part, which is
	// what the chain's Linker would hash again: the writer takes its head
	// (TestAppendBatchVerifies checks the chain against VerifyWith).
	_, err := l.w.AppendLinked(func(h hashchain.Head) (hashchain.Linked, error) {
		var head hashchain.Head
		lines, head = l.batchLines(ps, h)
		return hashchain.Linked{Lines: lines, Head: head}, nil
	})
	if err != nil {
		return nil, err
	}
	return lines, nil
}

// batchLines links ps after h and signs them once, over the batch's
// Merkle root. It returns the lines and the chain head after them.
func (l *Log) batchLines(ps []*Prepared, h hashchain.Head) ([][]byte, hashchain.Head) {
	lines := make([][]byte, len(ps))
	leaves := make([][]byte, len(ps))
	hashes := make([][32]byte, len(ps))
	for i, p := range ps {
		leaves[i] = p.chained(h.Next(), h.Hash, "")
		hashes[i] = LeafHash(leaves[i])
		h = hashchain.Head{Seq: h.Next(), Hash: hashchain.Sum(leaves[i])}
	}
	root, paths := MerkleTree(hashes)
	sig := encodeSig(ed25519.Sign(l.priv, rootMessage(root[:], uint64(len(ps)))))
	var proof []byte
	for i, p := range ps {
		proof = appendProof(proof[:0], uint64(i), uint64(len(ps)), paths[i], root)
		lines[i] = p.proved(leaves[i], proof, sig)
	}
	return lines, h
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
