package lease

import (
	"time"
	"unsafe"
)

// grant is the leases one request was granted together. They share a
// holder, an age, a TTL and a grace, and every heartbeat of the holder
// renews them together: they expire together, so the expiry heap and the
// holder index keep grants, not leases, and a heartbeat costs what the
// holder was granted, not what it holds.
//
// A lease's ID is its grant's base plus its index ("l-" and 16 hex
// digits): a base is random with its low 16 bits zero, so that an ID
// finds its grant without a map of every lease.
type grant struct {
	base       uint64
	holder     Holder
	age        time.Time
	acquiredAt time.Time
	expiresAt  time.Time
	ttl, grace time.Duration
	deadline   time.Time // expiresAt + grace
	entries    []entry
	live       int
	heapAt     int // in Table.exp
	holdAt     int // in Table.byHolder[holder]
}

const (
	grantBits = 16
	maxGrant  = 1 << grantBits // leases in one grant; a bigger request is split
)

// lease renders entry e of its grant.
func (e *entry) lease() Lease {
	g := e.g
	return Lease{ID: e.id, Holder: g.holder, Predicate: e.predicate, Resource: e.res, Object: e.object,
		Intent: e.intent, Age: g.age, AcquiredAt: g.acquiredAt, ExpiresAt: g.expiresAt, TTL: g.ttl, Grace: g.grace}
}

// appendID appends the ID of lease base+0.
func appendID(dst []byte, base uint64) []byte {
	const hexd = "0123456789abcdef"
	dst = append(dst, 'l', '-')
	for sh := 60; sh >= 0; sh -= 4 {
		dst = append(dst, hexd[base>>sh&15])
	}
	return dst
}

// leaseIDs renders the IDs base+0 ... base+n-1 in one string (they differ
// only in their last four digits): ID i is all[i*idLen:(i+1)*idLen].
func leaseIDs(base uint64, n int) (all string) {
	const hexd = "0123456789abcdef"
	buf := make([]byte, n*idLen)
	first := buf[:idLen]
	first[0], first[1] = 'l', '-'
	v := base
	for j := idLen - 1; j >= 2; j-- {
		first[j] = hexd[v&15]
		v >>= 4
	}
	for i := 1; i < n; i++ {
		b := buf[i*idLen : (i+1)*idLen]
		copy(b, first)
		for j, x := idLen-1, i; j >= idLen-4; j-- {
			b[j] = hexd[x&15]
			x >>= 4
		}
	}
	return unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is not written again
}

const idLen = 2 + 16

// parseID returns the grant base and index of a lease ID.
func parseID(id string) (base uint64, i int, ok bool) {
	if len(id) != 18 || id[0] != 'l' || id[1] != '-' {
		return 0, 0, false
	}
	var v uint64
	for j := 2; j < 18; j++ {
		c := id[j]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			return 0, 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v &^ (maxGrant - 1), int(v & (maxGrant - 1)), true
}

// entryLocked finds the live lease with this ID.
func (t *Table) entryLocked(id string) *entry {
	base, i, ok := parseID(id)
	if !ok {
		return nil
	}
	g := t.byGrant[base]
	if g == nil || i >= len(g.entries) || !g.entries[i].live {
		return nil
	}
	return &g.entries[i]
}

// newBaseLocked returns a grant base nobody holds.
func (t *Table) newBaseLocked() uint64 {
	for {
		b := t.rng.Uint64() &^ (maxGrant - 1)
		if b != 0 && t.byGrant[b] == nil {
			return b
		}
	}
}
