package bpfmap

import (
	"errors"

	"github.com/cilium/ebpf"
)

// batch is how many entries one batch syscall moves. A hash map's batch
// must hold its largest bucket (else ENOSPC); 256 keys is far above that.
const batch = 256

// Owned returns the entries of m whose key belongs to cgroup cgid, read
// with batch lookups (one syscall per batch entries instead of two per
// entry: a session's teardown reads maps of tens of thousands of entries)
// where the kernel has them, else by iteration.
func Owned[K, V any](m *ebpf.Map, cgid uint64, owner func(*K) uint64) (keys []K, vals []V, err error) {
	keyBuf, valBuf := make([]K, batch), make([]V, batch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keyBuf, valBuf, nil)
		for i := range n {
			if owner(&keyBuf[i]) == cgid {
				keys, vals = append(keys, keyBuf[i]), append(vals, valBuf[i])
			}
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return keys, vals, nil // the end
		case errors.Is(err, ebpf.ErrNotSupported):
			return iterOwned[K, V](m, cgid, owner)
		case err != nil:
			return keys, vals, err
		}
	}
}

func iterOwned[K, V any](m *ebpf.Map, cgid uint64, owner func(*K) uint64) (keys []K, vals []V, err error) {
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		if owner(&k) == cgid {
			keys, vals = append(keys, k), append(vals, v)
		}
	}
	return keys, vals, it.Err()
}

// DeleteOwned deletes every entry of m whose key belongs to cgroup cgid,
// in batches where the kernel can.
func DeleteOwned[K, V any](m *ebpf.Map, cgid uint64, owner func(*K) uint64) error {
	keys, _, err := Owned[K, V](m, cgid, owner)
	for len(keys) > 0 {
		n := min(len(keys), batch)
		if _, berr := m.BatchDelete(keys[:n], nil); berr != nil {
			// Unsupported, or an entry already gone (ENOENT stops a
			// batch): one by one.
			for _, k := range keys[:n] {
				_ = m.Delete(k)
			}
		}
		keys = keys[n:]
	}
	return err
}
