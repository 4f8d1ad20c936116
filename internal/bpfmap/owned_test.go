package bpfmap

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/klocklabs/klock/internal/testutil"
)

type key struct {
	Cgid uint64
	N    uint64
}

// TestOwnedAndDeleteOwned: over several batches' worth of entries of three
// cgroups, Owned returns exactly one cgroup's entries with their values
// and DeleteOwned removes those and nothing else.
func TestOwnedAndDeleteOwned(t *testing.T) {
	testutil.RequirePrivileged(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: 8192})
	if err != nil {
		testutil.Unavailable(t, "cannot create a BPF hash map: "+err.Error())
	}
	defer m.Close()
	const per = 3*batch + 17
	for cg := uint64(1); cg <= 3; cg++ {
		for i := range uint64(per) {
			if err := m.Put(key{cg, i}, cg*1000000+i); err != nil {
				t.Fatal(err)
			}
		}
	}
	owner := func(k *key) uint64 { return k.Cgid }
	keys, vals, err := Owned[key, uint64](m, 2, owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != per {
		t.Fatalf("Owned: %d entries of cgroup 2, want %d", len(keys), per)
	}
	seen := map[uint64]bool{}
	for i, k := range keys {
		if k.Cgid != 2 || vals[i] != 2000000+k.N || seen[k.N] {
			t.Fatalf("Owned: entry %+v = %d (duplicate %v)", k, vals[i], seen[k.N])
		}
		seen[k.N] = true
	}
	if err := DeleteOwned[key, uint64](m, 2, owner); err != nil {
		t.Fatal(err)
	}
	for cg := uint64(1); cg <= 3; cg++ {
		keys, _, err := Owned[key, uint64](m, cg, owner)
		if err != nil {
			t.Fatal(err)
		}
		want := per
		if cg == 2 {
			want = 0
		}
		if len(keys) != want {
			t.Errorf("after DeleteOwned(2): cgroup %d has %d entries, want %d", cg, len(keys), want)
		}
	}
}
