package termsafe

import "testing"

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"/srv/repo/src/a.go":            "/srv/repo/src/a.go",
		"ünï cødé.txt":                  "ünï cødé.txt",
		"new\nline":                     `new\nline`,
		"\x1b[2J\x1b[HCLEAN":            `\x1b[2J\x1b[HCLEAN`,
		"evil\u202etxt.exe":             `evil\u202etxt.exe`,
		"bad\xffbyte":                   `bad\xffbyte`,
		"tab\there, del\x7f, c1\u0085.": `tab\there, del\x7f, c1\u0085.`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}
