package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/hashchain"
)

// rfc6962Root is RFC 6962's MTH written out directly, to check MerkleTree
// against: MTH({d0}) = SHA-256(0x00 || d0), MTH(D[n]) =
// SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])), k the largest power of two < n.
func rfc6962Root(leaves [][]byte) [32]byte {
	if len(leaves) == 1 {
		return sha256.Sum256(append([]byte{0}, leaves[0]...))
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := rfc6962Root(leaves[:k]), rfc6962Root(leaves[k:])
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

func TestMerkleRootAndPathsRoundTrip(t *testing.T) {
	for n := 1; n <= 33; n++ {
		data := make([][]byte, n)
		hashes := make([][32]byte, n)
		for i := range data {
			data[i] = []byte(fmt.Sprintf("receipt %d of %d", i, n))
			hashes[i] = LeafHash(data[i])
		}
		root, paths := MerkleTree(hashes)
		if want := rfc6962Root(data); root != want {
			t.Fatalf("n=%d: root %x, RFC 6962 says %x", n, root, want)
		}
		for i := range hashes {
			got, err := RootFromPath(hashes[i], uint64(i), uint64(n), paths[i])
			if err != nil || got != root {
				t.Fatalf("n=%d leaf %d: path gives %x (%v), want %x", n, i, got, err, root)
			}
			if n > 1 {
				// The path of another leaf, or another index, must not fit.
				j := (i + 1) % n
				if got, err := RootFromPath(hashes[i], uint64(j), uint64(n), paths[i]); err == nil && got == root {
					t.Fatalf("n=%d: leaf %d proves with index %d", n, i, j)
				}
			}
		}
	}
	// A node's 64 bytes offered as a leaf do not prove (domain separation).
	h := [][32]byte{LeafHash([]byte("a")), LeafHash([]byte("b"))}
	root, _ := MerkleTree(h)
	fake := LeafHash(append(h[0][:], h[1][:]...))
	if got, _ := RootFromPath(fake, 0, 1, nil); got == root {
		t.Fatal("an interior node passes as a leaf")
	}
}

// tempLog opens an unsynced log in a new temporary directory.
func tempLog(t *testing.T) (l *Log, path string, pub ed25519.PublicKey, priv ed25519.PrivateKey) {
	t.Helper()
	pub, priv = newKey(t)
	path = filepath.Join(t.TempDir(), "receipts.jsonl")
	l, err := OpenLog(path, priv, WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	return l, path, pub, priv
}

// batchChain writes n receipts in one signed batch after one signed alone.
func batchChain(t *testing.T, n int) (string, []byte) {
	t.Helper()
	l, path, _, priv := tempLog(t)
	var err error
	if _, err := l.Append(sample(0)); err != nil {
		t.Fatal(err)
	}
	ps := make([]*Prepared, n)
	for i := range ps {
		if ps[i], err = Prepare(sample(i%10), priv); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.AppendBatch(ps); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestBatchSignedReceiptsVerifyAloneAndInChain(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 33} {
		path, data := batchChain(t, n)
		s, err := VerifyFile(path, nil, nil)
		if err != nil || s.Receipts != uint64(n+1) {
			t.Fatalf("n=%d: %v (%d receipts)", n, err, s.Receipts)
		}
		lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
		if bytes.Contains(lines[0], []byte(`"proof"`)) || !bytes.Contains(lines[1], []byte(`"proof":{"index":0,`)) {
			t.Fatalf("n=%d: want a receipt signed alone, then batch-signed ones:\n%s", n, data)
		}
		for i, line := range lines {
			r, err := Decode(line)
			if err != nil {
				t.Fatal(err)
			}
			if err := Check(r, nil); err != nil {
				t.Fatalf("n=%d: receipt %d alone: %v", n, i+1, err)
			}
		}
		// A chain cut inside the batch still verifies: each receipt
		// needs only its own proof, not its batch-mates.
		if n > 2 {
			cut := append(bytes.Join(lines[:1+n/2], []byte("\n")), '\n')
			if _, err := Verify(bytes.NewReader(cut), nil, nil); err != nil {
				t.Fatalf("n=%d cut: %v", n, err)
			}
		}
	}
}

func TestTamperedBatchReceiptIsRefused(t *testing.T) {
	_, data := batchChain(t, 5)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	target := lines[3] // index 2 of the batch
	r, err := Decode(target)
	if err != nil {
		t.Fatal(err)
	}
	otherRoot := strings.Repeat("ab", 32)
	for _, c := range []struct {
		name     string
		old, new string
		want     error
	}{
		{"leaf", `"cost_charged":150`, `"cost_charged":151`, ErrProof},
		{"path", r.Proof.Path[0], strings.Repeat("00", 32), ErrProof},
		{"index", `"index":2`, `"index":3`, ErrProof},
		// Leaf 2's path is the same in a batch of 6: the signed size
		// is what refuses it.
		{"size", `"size":5`, `"size":6`, ErrSignature},
		{"root", r.Proof.Root, otherRoot, ErrProof},
		{"signature", r.Signature, flipSig(t, r.Signature), ErrSignature},
		// The same hashes in capitals: the same proof, other bytes.
		{"path's case", r.Proof.Path[0], strings.ToUpper(r.Proof.Path[0]), ErrMalformed},
		{"root's case", r.Proof.Root, strings.ToUpper(r.Proof.Root), ErrMalformed},
	} {
		bad := bytes.Replace(target, []byte(c.old), []byte(c.new), 1)
		if bytes.Equal(bad, target) {
			t.Fatalf("%s: nothing replaced", c.name)
		}
		d, err := Decode(bad)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := Check(d, nil); !errors.Is(err, c.want) {
			t.Errorf("%s tampered: Check says %v, want %v", c.name, err, c.want)
		}
		chain := append(bytes.Join(append(append([][]byte{}, lines[:3]...), bad), []byte("\n")), '\n')
		_, err = Verify(bytes.NewReader(chain), nil, nil)
		var be *hashchain.BrokenError
		if !errors.As(err, &be) || be.Line != 4 || !strings.Contains(err.Error(), c.want.Error()) {
			t.Errorf("%s tampered: Verify says %v, want %v at line 4", c.name, err, c.want)
		}
	}
}

// testdata/klock-receipts-v1.jsonl was written by the single-signature
// form (one ed25519 signature per receipt, prev = SHA-256 of the whole
// line) before batch signing; such chains must keep verifying.
func TestSingleSignatureChainStillVerifies(t *testing.T) {
	s, err := VerifyFile(filepath.Join("testdata", "klock-receipts-v1.jsonl"), nil, func(r *Receipt) error {
		if r.Proof != nil {
			return fmt.Errorf("receipt %d has a proof", r.Seq)
		}
		return nil
	})
	if err != nil || s.Receipts != 3 {
		t.Fatalf("%v (%d receipts)", err, s.Receipts)
	}
}

// flipSig returns sig with one bit of its signature bytes flipped.
func flipSig(t *testing.T, sig string) string {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, sigPrefix))
	if err != nil {
		t.Fatal(err)
	}
	raw[10] ^= 1
	return encodeSig(raw)
}

// The chain writer takes the head AppendBatch computes instead of hashing
// each line again: batches back to back (of sizes that grow and shrink, so
// that the buffers the log keeps between batches are reused both ways),
// then a receipt signed alone (linked by the writer's own check against
// that head), must verify as a chain, and a reopened log must continue it.
func TestAppendBatchVerifies(t *testing.T) {
	l, path, _, priv := tempLog(t)
	var err error
	for _, n := range []int{3, 1, 5, 8, 2} {
		ps := make([]*Prepared, n)
		for i := range ps {
			if ps[i], err = Prepare(sample(i), priv); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.AppendBatch(ps); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(sample(1)); err != nil {
		t.Fatalf("a receipt after the batches does not link: %v", err)
	}
	l.Close()
	if l, err = OpenLog(path, priv); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(sample(2)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if s, err := VerifyFile(path, nil, nil); err != nil || s.Receipts != 21 {
		t.Fatalf("verify: %v (%d receipts)", err, s.Receipts)
	}
}

// Log.Prepare formats the key once; what it prepares must be what Prepare
// with the same key prepares.
func TestLogPrepareIsPrepare(t *testing.T) {
	l, _, _, priv := tempLog(t)
	defer l.Close()
	for i := 0; i < 3; i++ {
		a, err := l.Prepare(sample(i))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Prepare(sample(i), priv)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Body(), b.Body()) {
			t.Fatalf("Log.Prepare: %s\nPrepare: %s", a.Body(), b.Body())
		}
	}
}
