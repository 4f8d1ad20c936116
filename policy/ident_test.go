package policy

import (
	"regexp"
	"strings"
	"testing"
)

// The regular expression Valid replaces: both must agree on every input.
var reference = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func TestValidNameAgreesWithTheExpression(t *testing.T) {
	for _, s := range []string{"", "a", "A9", "-a", ".a", "_a", "a-b.c_d", "a/b", "..", ".", "a b", "é", "a\x00",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a\n"} {
		if got, want := ValidName(s, 128), reference.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v, the expression says %v", s, got, want)
		}
	}
}

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"agent-1", "..", "a/b", strings.Repeat("x", 130)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidName(s, 128), reference.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %v, the expression says %v", s, got, want)
		}
	})
}
