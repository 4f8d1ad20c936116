package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: any input either parses to a manifest that compiles and can be
// queried, or fails with located diagnostics. Never a panic or a hang.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/manifests/*.yaml")
	inv, _ := filepath.Glob("../examples/manifests/invalid/*.yaml")
	for _, p := range append(files, inv...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(manifest([]string{"CONSUMES FILE:/w/**", "CONSUMES NET:[::1]:1-2/udp"}, "")))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse("fuzz.yaml", data)
		if err != nil {
			ve, ok := err.(*ValidationError)
			if !ok {
				t.Fatalf("error is %T, want *ValidationError", err)
			}
			for _, d := range ve.Diags {
				if d.Pos.File != "fuzz.yaml" || d.Problem == "" {
					t.Fatalf("diagnostic without position or problem: %+v", d)
				}
			}
			return
		}
		rs, err := Compile(m)
		if err != nil {
			t.Fatalf("valid manifest does not compile: %v", err)
		}
		for _, in := range m.Intents {
			if in.Object.Type == ObjFile && !rs.Allows(FileTriple(in.Predicate, in.Object.Path.Path)).Allowed && in.Object.Path.Match != MatchChildren {
				t.Fatalf("declared %s does not allow its own path", in)
			}
		}
	})
}

// FuzzParseIntent: what parses renders to a string that parses to itself.
func FuzzParseIntent(f *testing.F) {
	for _, s := range []string{
		"MUTATES FILE:/srv/repo/src/**", "CONSUMES FILE:/a/*", "PROVIDES PROC:/usr/bin/git",
		"CONSUMES NET:api.example.com:443/tcp", "CONSUMES NET:[fd00::/8]:1-2/udp", "CONSUMES NET:10.0.0.0/8:*",
		"CONSUMES NET:raw", "DELETES FILE:${workdir}/x", "RENAMES FILE:/", "CONSUMES NET:*.example.com:443/tcp",
		"CONSUMES NET:[2001:db8::10]:443", "CONSUMES NET:[::1]:8080/tcp", "CONSUMES NET:[2001:db8::/32]:*",
		"CONSUMES NET:[2001:db8::1/32]:80", "CONSUMES NET:[fe80::1%eth0]:80", "CONSUMES NET:[::ffff:10.0.0.1]:80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseIntent(s)
		if err != nil {
			return
		}
		again, err := ParseIntent(in.String())
		if err != nil {
			t.Fatalf("%q rendered as %q which does not parse: %v", s, in.String(), err)
		}
		if again.String() != in.String() {
			t.Fatalf("round trip %q -> %q -> %q", s, in.String(), again.String())
		}
	})
}
