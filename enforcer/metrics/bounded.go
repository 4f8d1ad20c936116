package metrics

import (
	"sync"
	"unicode/utf8"
)

// boundedSet keeps a label's values to at most max distinct ones: the
// first max values seen are themselves, any later new one is "other".
// For labels whose values come from operators' declarations (grant ids),
// bounded in practice, which a faulty record must not make unbounded.
type boundedSet struct {
	mu   sync.Mutex
	max  int
	seen map[string]bool
}

func newBoundedSet(max int) *boundedSet {
	return &boundedSet{max: max, seen: map[string]bool{}}
}

// maxLabelLen bounds one value's length.
const maxLabelLen = 64

// label is v, or "other" once max other values are taken ("", a value
// longer than maxLabelLen and one that is not UTF-8 are "other" too).
func (b *boundedSet) label(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case v == "" || v == "other" || len(v) > maxLabelLen || !utf8.ValidString(v):
		return "other"
	case b.seen[v]:
		return v
	case len(b.seen) >= b.max:
		return "other"
	}
	b.seen[v] = true
	return v
}
