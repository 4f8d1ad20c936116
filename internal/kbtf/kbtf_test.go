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

// A load that warms the cache and the loads beside it share one decode.
func TestWarmIsTheSharedCache(t *testing.T) {
	a := Warm()
	if b := Cache(); a != b {
		t.Fatal("Warm returned a cache the other loads do not share")
	}
}
