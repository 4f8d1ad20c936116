package lease

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
)

// paths of the small universe: every clean absolute path over names
// {a,b,c} of depth <= maxDepth ("/" included).
func smallUniverse(maxDepth int) []string {
	out := []string{"/"}
	level := []string{""}
	for d := 1; d <= maxDepth; d++ {
		var next []string
		for _, p := range level {
			for _, n := range []string{"a", "b", "c"} {
				next = append(next, p+"/"+n)
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

func randPattern(r *rand.Rand, maxDepth int) policy.PathPattern {
	var b strings.Builder
	for range r.IntN(maxDepth + 1) {
		b.WriteString("/" + string(rune('a'+r.IntN(3))))
	}
	p := b.String()
	if p == "" {
		p = "/"
	}
	return policy.PathPattern{Path: p, Match: policy.Match(r.IntN(3))}
}

// TestPathOverlapAgainstBruteForce checks PathOverlap against its
// definition: some path of the universe is covered by both patterns. The
// universe goes one level deeper than any pattern, which is as deep as a
// witness ever needs to be (a child of the deepest pattern's path).
func TestPathOverlapAgainstBruteForce(t *testing.T) {
	const depth = 4
	universe := smallUniverse(depth + 1)
	r := rand.New(rand.NewPCG(1, 2))
	var both, neither int
	for i := 0; i < 20000; i++ {
		a, b := randPattern(r, depth), randPattern(r, depth)
		want := false
		for _, p := range universe {
			if a.Covers(p) && b.Covers(p) {
				want = true
				break
			}
		}
		if got := PathOverlap(a, b); got != want {
			t.Fatalf("PathOverlap(%s, %s) = %v, brute force says %v", a, b, got, want)
		}
		if got := PathOverlap(b, a); got != want {
			t.Fatalf("PathOverlap(%s, %s) = %v (not symmetric), brute force says %v", b, a, got, want)
		}
		if want {
			both++
		} else {
			neither++
		}
	}
	// The generator must exercise both answers, or the test proves little.
	if both < 1000 || neither < 1000 {
		t.Fatalf("unbalanced sample: %d overlapping, %d disjoint", both, neither)
	}
}

// TestPathOverlapExhaustive runs every pair of patterns of depth <= 2.
func TestPathOverlapExhaustive(t *testing.T) {
	var pats []policy.PathPattern
	for _, p := range smallUniverse(2) {
		for m := policy.MatchExact; m <= policy.MatchSubtree; m++ {
			pats = append(pats, policy.PathPattern{Path: p, Match: m})
		}
	}
	universe := smallUniverse(3)
	for _, a := range pats {
		for _, b := range pats {
			want := false
			for _, p := range universe {
				if a.Covers(p) && b.Covers(p) {
					want = true
					break
				}
			}
			if got := PathOverlap(a, b); got != want {
				t.Errorf("PathOverlap(%s, %s) = %v, want %v", a, b, got, want)
			}
		}
	}
}

func TestNetOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"example.com:443", "example.com:443", true},
		{"example.com:443", "EXAMPLE.com.:443", true},
		{"example.com:443", "example.org:443", false},
		{"example.com:443", "example.com:80", false},
		{"example.com:*", "example.com:80", true},
		{"example.com:1000-2000", "example.com:2000-3000", true},
		{"example.com:1000-1999", "example.com:2000-3000", false},
		{"example.com:443/tcp", "example.com:443/udp", false},
		{"example.com:443/tcp", "example.com:443", true},
		{"example.com:443/udp", "example.com:443/udp", true},
		{"10.0.0.1:80", "10.0.0.1:80", true},
		{"10.0.0.1:80", "10.0.0.2:80", false},
		{"10.0.0.0/8:80", "10.1.2.3:80", true},
		{"10.0.0.0/8:80", "11.0.0.0/8:80", false},
		{"10.0.0.0/8:80", "10.0.0.0/16:*", true},
		{"[::1]:80", "[::1]:80", true},
		{"[::1]:80", "127.0.0.1:80", false},
		{"[2001:db8::/32]:*", "[2001:db8::1]:22", true},
		// A name's addresses are unknown: only a whole family meets it.
		{"example.com:80", "93.184.216.34:80", false},
		{"example.com:80", "0.0.0.0/0:80", true},
		{"example.com:80", "[::/0]:80", true},
		{"example.com:80", "0.0.0.0/0:81", false},
		{"0.0.0.0/0:*", "[::/0]:*", false},
		{"raw", "raw", true},
		{"raw", "0.0.0.0/0:*", false},
		{"raw", "example.com:80", false},
	} {
		a, err := ParseResource("NET:" + c.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseResource("NET:" + c.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := Overlap(a, b); got != c.want {
			t.Errorf("Overlap(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := Overlap(b, a); got != c.want {
			t.Errorf("Overlap(%s, %s) = %v (not symmetric), want %v", c.b, c.a, got, c.want)
		}
	}
	// A FILE and a NET resource never overlap.
	f, _ := ParseResource("FILE:/**")
	n, _ := ParseResource("NET:0.0.0.0/0:*")
	if Overlap(f, n) || Overlap(n, f) {
		t.Error("FILE and NET overlap")
	}
}
