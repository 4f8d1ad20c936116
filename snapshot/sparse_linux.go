//go:build linux

package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"strings"

	"golang.org/x/sys/unix"
)

// Files with holes are stored and named by their data, not their size
// (doc.go, "Sparse files"): the object is a sparse file with the same
// bytes, its name the sha256 of sparseMagic, the size, and every 4 KiB
// block that is not all zeros with its index, and it ends in sparseTag so
// that it never equals the name of a plain file's sha256.
const (
	sparseTag   = ".sparse1"
	sparseBlock = 4096
)

var (
	sparseMagic = []byte("klock sparse v1\x00")
	zeroBlock   [sparseBlock]byte
	// errShrank: a file ended before the size its fstat gave (it changed
	// while it was read).
	errShrank = errors.New("file shorter than its size")
	// sparseReadHook, when set (tests only), runs after each read of a
	// copy by extents: where another process's write lands.
	sparseReadHook func()
)

func isSparseHash(h string) bool { return strings.HasSuffix(h, sparseTag) }

// hasHoles says whether fd's file (size bytes) has a hole that spans a
// whole block of the encoding (sparseBlock, aligned; the last one may
// end at the size), found by lseek(2) SEEK_HOLE and SEEK_DATA (a
// filesystem without hole support reports none). Smaller holes (of a
// filesystem of smaller blocks) do not count: the copy fills them, and
// the copy must be named as its source is. fd's offset is left at 0,
// where the sequential copy reads from.
func hasHoles(fd int, size int64) bool {
	defer unix.Seek(fd, 0, unix.SEEK_SET)
	for pos := int64(0); pos < size; {
		off, err := unix.Seek(fd, pos, unix.SEEK_HOLE)
		if err != nil || off >= size {
			return false
		}
		end, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case err == unix.ENXIO:
			end = alignUp(size) // a hole to the end
		case err != nil:
			return false
		}
		if alignUp(off) < end&^(sparseBlock-1) {
			return true
		}
		pos = max(end, off+1) // onward, even if the file changes meanwhile
	}
	return false
}

func alignUp(n int64) int64 { return (n + sparseBlock - 1) &^ (sparseBlock - 1) }

// sparseHasher hashes the canonical encoding of a file with holes:
// sparseMagic, size (8 bytes, big-endian), then for each block of
// sparseBlock bytes (the last one up to size) that is not all zeros, in
// order, its index (8 bytes, big-endian) and its bytes. Every block but
// the last is whole and the size comes first, so the encoding is
// parsed back unambiguously: two contents never share it.
type sparseHasher struct{ h hash.Hash }

func newSparseHasher(size int64) *sparseHasher {
	s := &sparseHasher{h: sha256.New()}
	s.h.Write(sparseMagic)
	s.h.Write(binary.BigEndian.AppendUint64(nil, uint64(size)))
	return s
}

// block adds the block at off (a multiple of sparseBlock) unless it is
// all zeros.
func (s *sparseHasher) block(off int64, b []byte) {
	if bytes.Equal(b, zeroBlock[:len(b)]) {
		return
	}
	var idx [8]byte
	binary.BigEndian.PutUint64(idx[:], uint64(off/sparseBlock))
	s.h.Write(idx[:])
	s.h.Write(b)
}

func (s *sparseHasher) name() string { return hex.EncodeToString(s.h.Sum(nil)) + sparseTag }

// sparseCopy reads src's data extents only (SEEK_DATA/SEEK_HOLE), never
// its holes, and hashes them as sparseHasher says. With dst >= 0 it
// writes them at their offsets in dst (an empty file) and sets dst's
// size: the holes are made by the size, never written. It returns the
// name and the bytes read. A block is read whole where a data extent
// starts or ends inside it (the part in the hole reads as zeros): the
// encoding does not depend on the filesystem's block size.
func sparseCopy(dst, src int, size int64, buf []byte) (string, int64, error) {
	s := newSparseHasher(size)
	buf = buf[:len(buf)/sparseBlock*sparseBlock]
	var next, read int64
	for next < size {
		off, err := unix.Seek(src, next, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole left
		}
		if err != nil {
			return "", read, err
		}
		end, err := unix.Seek(src, off, unix.SEEK_HOLE)
		if err != nil {
			return "", read, err
		}
		start := max(off&^(sparseBlock-1), next)
		end = min(alignUp(end), size)
		for start < end {
			n, err := preadFull(src, buf[:min(int64(len(buf)), end-start)], start)
			if err != nil {
				return "", read, err
			}
			if sparseReadHook != nil && dst >= 0 {
				sparseReadHook()
			}
			if err := copyBlocks(dst, s, buf[:n], start); err != nil {
				return "", read, err
			}
			start += int64(n)
			read += int64(n)
		}
		next = max(next, end)
	}
	if dst >= 0 {
		if err := unix.Ftruncate(dst, size); err != nil {
			return "", read, errWrite{err}
		}
	}
	return s.name(), read, nil
}

// copyBlocks hashes the blocks of b (read at off) and, when dst >= 0,
// writes all of b there: a block of zeros inside a data extent is data
// in the copy too (the same layout), only the hash leaves it out.
func copyBlocks(dst int, s *sparseHasher, b []byte, off int64) error {
	for i := 0; i < len(b); i += sparseBlock {
		s.block(off+int64(i), b[i:min(i+sparseBlock, len(b))])
	}
	if dst < 0 {
		return nil
	}
	if err := pwriteFull(dst, b, off); err != nil {
		return errWrite{err}
	}
	return nil
}

// preadFull reads len(b) bytes at off; a file that ends first is
// errShrank (a block may be short only at the end of the file, which
// the callers never read past).
func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, errShrank
		}
		n += m
	}
	return n, nil
}

func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		m, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[m:], off+int64(m)
	}
	return nil
}

// digestFD names fd's content the way the store would: by its sparse
// address when it has holes, by its sha256 otherwise.
func digestFD(fd int, buf []byte) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if hasHoles(fd, st.Size) {
		h, _, err := sparseCopy(-1, fd, st.Size, buf)
		return h, err
	}
	h, _, err := hashFD(fd, buf)
	return h, err
}

// digestAs names fd's content by its sparse address (sparse) or its
// sha256, whatever its holes, and returns its size: what a clone is
// checked against.
func digestAs(fd int, sparse bool, buf []byte) (string, int64, error) {
	if !sparse {
		return hashFD(fd, buf)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", 0, err
	}
	h, _, err := sparseCopy(-1, fd, st.Size, buf)
	return h, st.Size, err
}
