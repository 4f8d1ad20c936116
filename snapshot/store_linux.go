//go:build linux

package snapshot

import (
	"bufio"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The object store: <root>/objects/<first 2 hex digits>/<other 62>, one
// read-only file per distinct content, named by its sha256, shared by all
// sessions under root.
const objectsDir = "objects"

func objectPath(root, h string) string {
	return filepath.Join(root, objectsDir, h[:2], h[2:])
}

// validHash: a sha256 in hex, alone (a plain file) or followed by
// sparseTag (a file with holes).
func validHash(h string) bool {
	h = strings.TrimSuffix(h, sparseTag)
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// reflinkOK caches, per (source dev, destination dev), whether FICLONE
// works, so a filesystem without it costs one failed ioctl per process.
var reflinkOK sync.Map

func tryReflink(dst, src int, srcDev, dstDev uint64) (bool, error) {
	key := [2]uint64{srcDev, dstDev}
	if v, ok := reflinkOK.Load(key); ok && !v.(bool) {
		return false, nil
	}
	err := unix.IoctlFileClone(dst, src)
	switch err {
	case nil:
		reflinkOK.Store(key, true)
		return true, nil
	case unix.EOPNOTSUPP, unix.EXDEV, unix.EINVAL, unix.ENOTTY, unix.ENOSYS, unix.EBADF:
		reflinkOK.Store(key, false)
		return false, nil
	}
	return false, err
}

// openRead opens a file for reading without updating its atime when the
// caller may (owner or CAP_FOWNER).
func openRead(p string) (int, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

// hashFD hashes an fd's content from offset 0.
func hashFD(fd int, buf []byte) (string, int64, error) {
	h := sha256.New()
	var off, n int64
	for {
		m, err := unix.Pread(fd, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", n, err
		}
		if m == 0 {
			break
		}
		h.Write(buf[:m])
		off += int64(m)
		n += int64(m)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// copyHash copies src to dst through buf, hashing what it copies: one pass
// over the data gives both the copy and the name it is stored under, and
// the hash is of exactly the bytes written.
type errWrite struct{ err error }

func copyHash(dst, src int, h hash.Hash, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := unix.Read(src, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, nil
		}
		h.Write(buf[:m])
		for w := 0; w < m; {
			k, err := unix.Write(dst, buf[w:m])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return n, errWrite{err}
			}
			w += k
		}
		n += int64(m)
	}
}

func (e errWrite) Error() string { return e.err.Error() }
func (e errWrite) Unwrap() error { return e.err }

// copyResult is what copyIn learned about one file.
type copyResult struct {
	hash      string
	size      int64 // the copy's size
	data      int64 // the bytes read to make it (holes are not read)
	reflinked bool
	st        unix.Stat_t // the source's fstat after the copy
}

// sameVersion: nothing about the file's content changed between a and b.
func sameVersion(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// copyIn copies the regular file src into dstPath (a new file), by FICLONE
// when the filesystems allow it and by read+write otherwise, and returns
// the sha256 of the copy. It retries when the source changes under it.
func copyIn(src, dstPath string, dstDev uint64, where string) (copyResult, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for try := 0; ; try++ {
		res, changed, err := copyInOnce(src, dstPath, dstDev, buf, where)
		if err != nil || !changed {
			return res, err
		}
		if try == 3 {
			return res, &Error{Op: "copy", Path: src, Kind: ErrChanged, Hint: "something kept writing to it; stop it before the session starts"}
		}
	}
}

func copyInOnce(src, dstPath string, dstDev uint64, buf []byte, where string) (res copyResult, changed bool, err error) {
	sfd, err := openRead(src)
	if err != nil {
		return res, false, pathErr("open", src, err, src)
	}
	defer unix.Close(sfd)
	var before unix.Stat_t
	if err := unix.Fstat(sfd, &before); err != nil {
		return res, false, pathErr("stat", src, err, src)
	}
	// Read-write: a clone is hashed from the copy itself.
	dfd, err := unix.Open(dstPath, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return res, false, pathErr("back up", src, err, where)
	}
	defer unix.Close(dfd)
	sparse := hasHoles(sfd, before.Size)
	ok, err := tryReflink(dfd, sfd, before.Dev, dstDev)
	if err != nil {
		return res, false, pathErr("back up (clone)", src, err, where)
	}
	if ok {
		res.reflinked = true
		res.hash, res.size, err = digestAs(dfd, sparse, buf)
		if errors.Is(err, errShrank) {
			return res, true, nil
		}
		if err != nil {
			return res, false, pathErr("back up (hash)", src, err, where)
		}
	} else {
		if res, err = copyData(dfd, sfd, before.Size, sparse, buf); errors.Is(err, errShrank) {
			return res, true, nil
		}
		if err != nil {
			var we errWrite
			if errors.As(err, &we) {
				return res, false, pathErr("back up", src, we.err, where)
			}
			return res, false, pathErr("read", src, err, src)
		}
	}
	if err := unix.Fstat(sfd, &res.st); err != nil {
		return res, false, pathErr("stat", src, err, src)
	}
	return res, !sameVersion(&before, &res.st) || res.size != res.st.Size, nil
}

// copyData copies src (size bytes by its fstat) into the empty dst: a
// file with holes by its data extents only, into a file with the same
// holes (sparseCopy), any other in one read→sha256→write pass.
func copyData(dst, src int, size int64, sparse bool, buf []byte) (res copyResult, err error) {
	if sparse {
		res.hash, res.data, err = sparseCopy(dst, src, size, buf)
		res.size = size
		return res, err
	}
	h := sha256.New()
	res.size, err = copyHash(dst, src, h, buf)
	res.data = res.size
	res.hash = hex.EncodeToString(h.Sum(nil))
	return res, err
}

// hashPath names a file's content in place (no copy), by its sha256 or,
// when it has holes, its sparse address, and returns its stat.
func hashPath(p string) (string, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openRead(p)
	if err != nil {
		return "", st, err
	}
	defer unix.Close(fd)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	h, err := digestFD(fd, *bp)
	if err != nil {
		return "", st, err
	}
	err = unix.Fstat(fd, &st)
	return h, st, err
}

// copyOut fills the open, empty file dfd with object h, verifying that the
// bytes written hash to h. A sparse object (sparseTag) is copied by its
// data extents and leaves dfd with the same holes. dfd should be open
// read-write: a clone is verified by reading it (a write-only one is
// undone and copied instead).
func copyOut(root, h string, dfd int, dstDev uint64) error {
	obj := objectPath(root, h)
	sfd, err := unix.Open(obj, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return &Error{Op: "read object", Path: obj, Kind: ErrCorrupt, Err: err, Hint: "the object store lost this content (was it garbage-collected or edited?)"}
		}
		return pathErr("read object", obj, err, root)
	}
	defer unix.Close(sfd)
	var sst unix.Stat_t
	if err := unix.Fstat(sfd, &sst); err != nil {
		return pathErr("stat object", obj, err, root)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	sparse := isSparseHash(h)
	ok, err := tryReflink(dfd, sfd, sst.Dev, dstDev)
	if err != nil {
		return err
	}
	var got string
	if ok {
		got, _, err = digestAs(dfd, sparse, *bp)
		if err == unix.EBADF {
			// Write-only: the clone cannot be read back; copy instead.
			ok = false
			err = unix.Ftruncate(dfd, 0)
		}
	}
	if !ok && err == nil {
		var res copyResult
		res, err = copyData(dfd, sfd, sst.Size, sparse, *bp)
		got = res.hash
	}
	if errors.Is(err, errShrank) {
		return &Error{Op: "verify object", Path: obj, Kind: ErrCorrupt, Err: err, Hint: "the object changed while it was read"}
	}
	if err != nil {
		return err
	}
	if got != h {
		return &Error{Op: "verify object", Path: obj, Kind: ErrCorrupt, Hint: fmt.Sprintf("content hashes to %s, recorded as %s", got, h)}
	}
	return nil
}

// index is the stat cache: path -> what the file looked like when its hash
// was computed. A file whose (dev, ino, size, mtime, ctime) still match is
// not read again. Entries are only added for files whose ctime was at
// least racyWindow older than the end of their hashing, so a write in the
// same timestamp tick cannot hide behind an equal ctime.
type indexEntry struct {
	Dev, Ino           uint64
	Size, Mtime, Ctime int64
	Hash               string
}

type index map[string]indexEntry

const indexFile = "index"

// racyWindow is well over two jiffies (HZ >= 100) of the coarse clock the
// kernel stamps files with.
const racyWindow = 50_000_000 // ns

func loadIndex(root string) index {
	f, err := os.Open(filepath.Join(root, indexFile))
	if err != nil {
		return index{}
	}
	defer f.Close()
	var ix index
	if err := gob.NewDecoder(bufio.NewReader(f)).Decode(&ix); err != nil || ix == nil {
		return index{} // a cache: a bad one is just empty
	}
	return ix
}

func (ix index) lookup(e *Entry) (string, bool) {
	c, ok := ix[e.Path]
	if !ok || c.Dev != e.Dev || c.Ino != e.Ino || c.Size != e.Size || c.Mtime != e.Mtime || c.Ctime != e.Ctime {
		return "", false
	}
	return c.Hash, true
}

// writeIndexTmp writes the index to a temp file in root and returns its
// name (fsynced; the caller renames it into place).
func writeIndexTmp(root string, ix index) (string, error) {
	f, err := os.CreateTemp(root, ".index-*")
	if err != nil {
		return "", err
	}
	w := bufio.NewWriter(f)
	err = gob.NewEncoder(w).Encode(ix)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
