package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseIntent(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"MUTATES FILE:/srv/repo/src/**", "MUTATES FILE:/srv/repo/src/**", ""},
		{"CONSUMES FILE:/a/*", "CONSUMES FILE:/a/*", ""},
		{"CONSUMES FILE:/*", "CONSUMES FILE:/*", ""},
		{"CONSUMES FILE:/**", "CONSUMES FILE:/**", ""},
		{"DEPENDS_ON FILE:/srv/repo/go.mod", "DEPENDS_ON FILE:/srv/repo/go.mod", ""},
		{"PROVIDES PROC:/usr/bin/git", "PROVIDES PROC:/usr/bin/git", ""},
		{"CONSUMES NET:api.example.com:443", "CONSUMES NET:api.example.com:443", ""},
		{"CONSUMES NET:API.Example.COM.:443/tcp", "CONSUMES NET:api.example.com:443/tcp", ""},
		{"CONSUMES NET:10.0.0.0/8:*", "CONSUMES NET:10.0.0.0/8:*", ""},
		{"CONSUMES NET:[::1]:8080", "CONSUMES NET:[::1]:8080", ""},
		{"CONSUMES NET:[fd00::/8]:1000-2000/udp", "CONSUMES NET:[fd00::/8]:1000-2000/udp", ""},
		{"CONSUMES NET:raw", "CONSUMES NET:raw", ""},
		{"PROVIDES NET:127.0.0.1:8080", "PROVIDES NET:127.0.0.1:8080", ""},
		{"MUTATES FILE:${workdir}/src/**", "MUTATES FILE:${workdir}/src/**", ""},
		// errors, each naming what would be right
		{"MUTATE FILE:/a", "", "did you mean MUTATES"},
		{"MUTATES", "", `want "PREDICATE TYPE:object"`},
		{"MUTATES /a", "", "no type"},
		{"MUTATES SYMBOL:/a", "", "want FILE, NET or PROC"},
		{"MUTATES FILE:a/b", "", "relative"},
		{"MUTATES FILE:/a/*.go", "", "nearest enforceable form: /a/*"},
		{"MUTATES FILE:/a/**/*.go", "", "nearest enforceable form: /a/**"},
		{"MUTATES FILE:/a/b*", "", "nearest enforceable form: /a/*"},
		{"MUTATES FILE:/a/b*/c", "", "nearest enforceable form: /a/**"},
		{"MUTATES FILE:/a/./b", "", `the kernel sees "/a/b"`},
		{"MUTATES FILE:/a//b", "", `the kernel sees "/a/b"`},
		{"CONSUMES NET:*:443", "", "0.0.0.0/0:443"},
		{"CONSUMES NET:*.Example.com.:443", "CONSUMES NET:*.example.com:443", ""},
		{"CONSUMES NET:a.*.example.com:443", "", "only one leading label"},
		{"CONSUMES NET:*a.example.com:443", "", "only one leading label"},
		{"CONSUMES NET:*.*.example.com:443", "", "only one leading label"},
		{"CONSUMES NET:*.:443", "", "empty or over-long label"},
		{"CONSUMES NET:::1:80", "", "must be in brackets"},
		{"CONSUMES NET:[::ffff:1.2.3.4]:80", "", "write the IPv4 form 1.2.3.4"},
		{"CONSUMES NET:10.0.0.1/8:80", "", "host bits set; write 10.0.0.0/8"},
		{"CONSUMES NET:1.2.3.4:70000", "", "0-65535"},
		{"CONSUMES NET:1.2.3.4:90-80", "", "runs backwards; write 80-90"},
		{"CONSUMES NET:300.1.1.1:80", "", "not a valid IPv4"},
		{"CONSUMES NET:example.com", "", "want host:port"},
		{"CONSUMES NET:bad_h$st:80", "", "invalid character"},
	} {
		in, err := ParseIntent(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseIntent(%q) err = %v, want containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || in.String() != tc.want {
			t.Errorf("ParseIntent(%q) = %q, %v; want %q", tc.in, in, err, tc.want)
		}
	}
	if _, err := ParseIntent("MUTATES FILE:/a/*.go"); !errors.Is(err, ErrUnenforceable) {
		t.Errorf("glob error does not wrap ErrUnenforceable: %v", err)
	}
}

func TestPathPatternCovers(t *testing.T) {
	for _, tc := range []struct {
		pat, path string
		want      bool
	}{
		{"/a/**", "/a", true}, {"/a/**", "/a/b/c", true}, {"/a/**", "/ab", false},
		{"/a/*", "/a/b", true}, {"/a/*", "/a/b/c", false}, {"/a/*", "/a", false},
		{"/a", "/a", true}, {"/a", "/a/b", false},
		{"/**", "/x/y", true}, {"/*", "/x", true}, {"/*", "/x/y", false},
	} {
		p, err := ParsePathPattern(tc.pat)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Covers(tc.path); got != tc.want {
			t.Errorf("%s covers %s = %v, want %v", tc.pat, tc.path, got, tc.want)
		}
	}
}

func TestMapFormIntentAndSubject(t *testing.T) {
	m := mustParse(t, manifest([]string{`{predicate: MUTATES, object: "FILE:/w/x", confidence: High, reason: edits x}`}, ""))
	if got := m.Intents[0].String(); got != "MUTATES FILE:/w/x" || m.Intents[0].Reason != "edits x" {
		t.Fatalf("map form = %q %+v", got, m.Intents[0])
	}
	_, err := Parse("t.yaml", []byte(manifest([]string{`{predicate: MUTATES, object: "FILE:/w/x", subject: other-agent}`}, "")))
	if c := codes(err); len(c) != 1 || c[0] != "subject" {
		t.Fatalf("foreign subject: %v", err)
	}
	_, err = Parse("t.yaml", []byte(manifest([]string{`{predicate: MUTATES, objct: "FILE:/w/x"}`}, "")))
	if err == nil || !strings.Contains(err.Error(), "did you mean object?") {
		t.Fatalf("typo in map form: %v", err)
	}
}

func TestWorkdirExpansion(t *testing.T) {
	m := mustParse(t, manifest([]string{"MUTATES FILE:${workdir}/src/**", "CONSUMES FILE:${workdir}", "PROVIDES PROC:${workdir}/bin/tool"}, ""))
	want := []string{"MUTATES FILE:/w/src/**", "CONSUMES FILE:/w", "PROVIDES PROC:/w/bin/tool"}
	for i, w := range want {
		if got := m.Intents[i].String(); got != w {
			t.Errorf("intent %d = %q, want %q", i, got, w)
		}
	}
}

func TestNetPatternMatches(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"api.example.com:443", "api.example.com", true},
		{"api.example.com:443", "API.Example.COM.", true},
		{"api.example.com:443", "x.api.example.com", false},
		{"api.example.com:443", "example.com", false},
		{"*.example.com:443", "a.example.com", true},
		{"*.example.com:443", "A.B.Example.com.", true},
		{"*.example.com:443", "example.com", false},
		{"*.example.com:443", ".example.com", false},
		{"*.example.com:443", "a..example.com", false},
		{"*.example.com:443", "aexample.com", false},
		{"*.example.com:443", "a.example.com.evil", false},
		{"10.0.0.1:443", "10.0.0.1", false},
	} {
		p, err := ParseNetPattern(tc.pat)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Matches(tc.name); got != tc.want {
			t.Errorf("%s matches %q = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
}

// TestWildcardHostIsNotResolved: a wildcard has no addresses until the
// proxy answers a name it matches (WithHostAddrs), and a triple by name is
// allowed by a wildcard that matches it.
func TestWildcardHostIsNotResolved(t *testing.T) {
	m := &Manifest{Agent: Agent{ID: "a"}, Mode: ModeStrict}
	for _, s := range []string{"CONSUMES NET:*.example.com:443/tcp", "CONSUMES NET:api.test:80/tcp"} {
		in, err := ParseIntent(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Intents = append(m.Intents, in)
	}
	rs, err := Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	var looked []string
	rs, err = rs.Resolve(func(h string) ([]netip.Addr, error) {
		looked = append(looked, h)
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	})
	if err != nil || len(looked) != 1 || looked[0] != "api.test" {
		t.Fatalf("Resolve looked up %v (%v); want only api.test", looked, err)
	}
	at := func(addr string) Triple {
		return Triple{Predicate: Consumes, Type: ObjNet, Addr: netip.MustParseAddrPort(addr), Proto: ProtoTCP}
	}
	if rs.Allows(at("198.51.100.7:443")).Allowed {
		t.Fatal("an unanswered address is allowed")
	}
	if !rs.Allows(Triple{Predicate: Consumes, Type: ObjNet, Host: "x.example.com", Addr: netip.AddrPortFrom(netip.Addr{}, 443), Proto: ProtoTCP}).Allowed {
		t.Error("x.example.com:443 is not allowed by *.example.com:443")
	}
	rs2, err := rs.WithHostAddrs(map[string][]netip.Addr{"*.example.com": {netip.MustParseAddr("198.51.100.7")}})
	if err != nil {
		t.Fatal(err)
	}
	if !rs2.Allows(at("198.51.100.7:443")).Allowed || rs2.Allows(at("198.51.100.7:80")).Allowed || !rs2.Allows(at("192.0.2.1:80")).Allowed {
		t.Error("answered addresses are not allowed on the intent's ports only, or Resolve's were lost")
	}
	rs3, err := rs2.WithHostAddrs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if rs3.Allows(at("198.51.100.7:443")).Allowed || !rs3.Allows(at("192.0.2.1:80")).Allowed {
		t.Error("expired answers stay, or Resolve's went")
	}
}
