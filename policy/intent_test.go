package policy

import (
	"errors"
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
		{"CONSUMES NET:*.example.com:443", "", "list each host name"},
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
