package kbtf

import "testing"

// Loads that overlap in time must decode the kernel's types once: they
// get the same cache while one of them still holds it.
func TestCacheSharedWhileHeld(t *testing.T) {
	a := Cache()
	b := Cache()
	if a != b {
		t.Fatal("two loads running at once got different caches")
	}
}
