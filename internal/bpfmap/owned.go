package bpfmap

import "github.com/cilium/ebpf"

// DeleteOwned deletes every entry of m whose key belongs to cgroup cgid,
// as owner tells from the key. K and V are the map's key and value types.
func DeleteOwned[K, V any](m *ebpf.Map, cgid uint64, owner func(*K) uint64) error {
	var k K
	var v V
	var drop []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		if owner(&k) == cgid {
			drop = append(drop, k)
		}
	}
	for _, k := range drop {
		m.Delete(k)
	}
	return it.Err()
}
