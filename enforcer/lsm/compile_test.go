package lsm

import (
	"errors"
	"math/rand"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

func ruleset(t testing.TB, intents ...string) *policy.Ruleset {
	t.Helper()
	m, err := policy.Parse("test.yaml", []byte(testutil.ManifestYAML("lsm-test", "strict", "/w", intents...)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// The kernel's longest-match decision (lookup, the Go twin of
// lookup_have in bpf/lsm.bpf.c) must agree with policy.Ruleset.Allows on
// every predicate for every path, or the two layers would judge one
// operation differently.
func TestCompileAgreesWithAllows(t *testing.T) {
	rs := ruleset(t,
		"CONSUMES FILE:/w/**",
		"MUTATES FILE:/w/src/**",
		"PROVIDES FILE:/w/out/*",
		"DELETES FILE:/w/out/tmp",
		"RENAMES FILE:/w/src/a/*",
		"DEPENDS_ON FILE:/w/go.mod",
		"MUTATES FILE:/w/src/a/b",
		"CONSUMES FILE:/x/*",
		"PROVIDES FILE:/x/y/**",
		"PROVIDES PROC:/w/bin/**",
		"PROVIDES PROC:/usr/bin/git",
		"PROVIDES FILE:/usr/lib/w/**",
	)
	entries, err := compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	parts := []string{"w", "src", "a", "b", "out", "tmp", "go.mod", "x", "y", "bin", "usr", "git", "etc", "z", "lib", "lib64"}
	rng := rand.New(rand.NewSource(1))
	paths := []string{"/", "/w", "/w/src", "/w/out", "/x", "/x/y", "/usr/bin/git", "/etc/hosts"}
	for i := 0; i < 20000; i++ {
		n := 1 + rng.Intn(5)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteString("/" + parts[rng.Intn(len(parts))])
		}
		paths = append(paths, b.String())
	}
	for _, q := range paths {
		got := lookup(entries, q)
		for _, p := range policy.Predicates() {
			want := rs.Allows(policy.FileTriple(p, q)).Allowed
			if has := got&(1<<p) != 0; has != want {
				t.Fatalf("%s %s: kernel rules say %v, Allows says %v (bits %07b)", p, q, has, want, got)
			}
		}
		want := rs.Allows(policy.ExecTriple(q)).Allowed
		if has := got&accExec != 0; has != want {
			t.Fatalf("exec %s: kernel rules say %v, Allows says %v", q, has, want)
		}
		want = rs.MapsExec(q)
		if has := got&(accExec|accMapExec) != 0; has != want {
			t.Fatalf("executable mapping of %s: kernel rules say %v, MapsExec says %v (bits %08b)", q, has, want, got)
		}
	}
}

// TestCompileLibraries: the baseline's library directories map
// executable (and nothing else), except where the agent may write; a PROC
// intent maps too; the workdir does not.
func TestCompileLibraries(t *testing.T) {
	rs := ruleset(t, "CONSUMES FILE:/w/**", "PROVIDES FILE:/usr/local/lib/mine/**", "PROVIDES PROC:/w/bin/tool")
	entries, err := compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/libc.so.6":                 true,
		"/usr/lib/python3.11/lib-dynload/_ssl.cpython-311.so": true,
		"/lib64/ld-linux-x86-64.so.2":                         true,
		"/usr/local/lib/libfoo.so":                            true,
		"/usr/local/lib/mine/evil.so":                         false,
		"/w/bin/tool":                                         true,
		"/w/lib/x.so":                                         false,
		"/usr/bin/id":                                         false,
		"/tmp/x.so":                                           false,
	} {
		got := lookup(entries, q)
		if has := got&(accExec|accMapExec) != 0; has != want || rs.MapsExec(q) != want {
			t.Errorf("%s: kernel %v, MapsExec %v, want %v", q, has, rs.MapsExec(q), want)
		}
		if got&accMapExec != 0 && got&accExec != 0 && q != "/w/bin/tool" {
			t.Errorf("%s: a library directory grants exec", q)
		}
	}
	if lookup(entries, "/usr/lib/x86_64-linux-gnu/libc.so.6")&accExec != 0 {
		t.Error("a library directory must not grant exec (only executable mappings)")
	}
}

// A path longer than an LPM key is decided by its first bytes, which is
// exact because every rule fits: a subtree rule still covers it, nothing
// else does.
func TestCompileLongPaths(t *testing.T) {
	rs := ruleset(t, "MUTATES FILE:/w/deep/**", "CONSUMES FILE:/w/*")
	entries, err := compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	long := "/w/deep/" + strings.Repeat("d/", 200) + "f"
	if got := lookup(entries, long); got&(1<<policy.Mutates) == 0 {
		t.Fatalf("long path under a subtree rule: bits %07b", got)
	}
	if got := lookup(entries, "/w/"+strings.Repeat("n", 250)); got&(1<<policy.Consumes) == 0 {
		t.Fatalf("long name directly under /w/*: bits %07b", got)
	}
	if got := lookup(entries, "/w/other/"+strings.Repeat("n", 250)); got != 0 {
		t.Fatalf("long path two levels under /w/*: bits %07b, want none", got)
	}
}

func TestCompileRefusesARuleTooLongForTheKernel(t *testing.T) {
	rs := ruleset(t, "CONSUMES FILE:/w/"+strings.Repeat("x", 250))
	_, err := compile(rs)
	var tl *TooLongError
	if !errors.As(err, &tl) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want a TooLongError", err)
	}
}
