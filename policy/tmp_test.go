package policy

import (
	"strings"
	"testing"
)

func TestTmpdirExpandsToTmp(t *testing.T) {
	m := mustParse(t, manifest([]string{"MUTATES FILE:${tmpdir}/**", "PROVIDES FILE:${tmpdir}/out.txt", "CONSUMES FILE:${tmpdir}"}, ""))
	var got []string
	for _, in := range m.Intents {
		got = append(got, in.String())
	}
	want := []string{"MUTATES FILE:/tmp/**", "PROVIDES FILE:/tmp/out.txt", "CONSUMES FILE:/tmp"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("intents %q, want %q", got, want)
	}
	// ${tmpdirs} is no variable: a relative path, refused.
	if _, err := Parse("t.yaml", []byte(manifest([]string{"MUTATES FILE:${tmpdirs}/x"}, ""))); err == nil {
		t.Error("${tmpdirs}/x accepted")
	}
}

func TestTmpField(t *testing.T) {
	m := mustParse(t, manifest(nil, ""))
	if m.Tmp != TmpPrivate || !m.PrivateTmp() {
		t.Errorf("default tmp %q, private %v; want private", m.Tmp, m.PrivateTmp())
	}
	m = mustParse(t, "tmp: private\n"+manifest(nil, ""))
	if !m.PrivateTmp() {
		t.Error("tmp: private is not private")
	}
	m = mustParse(t, "tmp: host\n"+manifest(nil, ""))
	if m.Tmp != TmpHost || m.PrivateTmp() {
		t.Errorf("tmp: host read as %q, private %v", m.Tmp, m.PrivateTmp())
	}
	// A workdir in the host's /tmp needs the host's /tmp.
	m = mustParse(t, "tmp: private\n"+strings.Replace(manifest(nil, ""), "workdir: /w", "workdir: /var/tmp/w", 1))
	if m.PrivateTmp() {
		t.Error("a workdir in /var/tmp: private tmp")
	}
	_, err := Parse("t.yaml", []byte("tmp: shared\n"+manifest(nil, "")))
	if err == nil || !strings.Contains(err.Error(), "t.yaml:1:1: tmp:") || !strings.Contains(err.Error(), "private, host") {
		t.Errorf("tmp: shared: %v", err)
	}
	for p, want := range map[string]bool{"/tmp": true, "/tmp/x": true, "/var/tmp/a/b": true, "/tmpx": false, "/var/tmpfoo": false, "/var": false, "/": false, "": false} {
		if InTmp(p) != want {
			t.Errorf("InTmp(%q) = %v", p, !want)
		}
	}
}
