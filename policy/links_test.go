package policy

import (
	"errors"
	"testing"
)

func TestFollowLinks(t *testing.T) {
	rs, err := Compile(mustParse(t, manifest([]string{
		"PROVIDES PROC:/bin/sh",
		"CONSUMES FILE:/etc/alt/**",
		"MUTATES FILE:/w/planted",
	}, "")))
	if err != nil {
		t.Fatal(err)
	}
	if rs.Allows(ExecTriple("/usr/bin/dash")).Allowed {
		t.Fatal("dash allowed before FollowLinks")
	}
	links := map[string]string{"/bin/sh": "/usr/bin/dash", "/etc/alt": "/usr/share/alt"}
	fl, err := rs.FollowLinks(func(p string) (string, bool) { t, ok := links[p]; return t, ok })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tr   Triple
		want string // the intent that allows it, "" for denied
	}{
		{ExecTriple("/usr/bin/dash"), "PROVIDES PROC:/bin/sh"},
		{FileTriple(Consumes, "/usr/bin/dash"), "PROVIDES PROC:/bin/sh"}, // what runs may be read
		{ExecTriple("/bin/sh"), "PROVIDES PROC:/bin/sh"},
		{FileTriple(Consumes, "/usr/share/alt/x/y"), "CONSUMES FILE:/etc/alt/**"},
		{FileTriple(Mutates, "/usr/share/alt/x"), ""},
		{ExecTriple("/usr/bin/bash"), ""},
		{FileTriple(Mutates, "/etc/shadow"), ""}, // planted was not followed
	} {
		d := fl.Allows(c.tr)
		got := ""
		if d.Allowed {
			got = d.Intent.String()
		}
		if got != c.want {
			t.Errorf("%s: allowed by %q, want %q", c.tr, got, c.want)
		}
	}
	if got := fl.Links(); len(got) != 2 || got["/bin/sh"] != "/usr/bin/dash" {
		t.Errorf("Links = %v", got)
	}
	// An amendment keeps the links.
	in, err := ParseIntent("CONSUMES FILE:/opt/x")
	if err != nil {
		t.Fatal(err)
	}
	am, err := fl.With(in)
	if err != nil {
		t.Fatal(err)
	}
	if !am.Allows(ExecTriple("/usr/bin/dash")).Allowed {
		t.Error("With dropped the followed links")
	}
	if _, err := rs.FollowLinks(func(string) (string, bool) { return "relative", true }); !errors.Is(err, ErrInvalidManifest) {
		t.Errorf("a relative target: %v", err)
	}
}
