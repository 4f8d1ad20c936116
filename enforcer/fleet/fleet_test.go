package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"no endpoints", Config{}, false},
		{"relative prefix", Config{Endpoints: []string{"http://a"}, Prefix: "klock"}, false},
		{"cert without key", Config{Endpoints: []string{"http://a"}, Cert: "c.pem"}, false},
		{"defaults", Config{Endpoints: []string{"http://a"}}, true},
	} {
		err := tc.c.normalize()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.ok && (tc.c.Prefix != DefaultPrefix || tc.c.Host == "") {
			t.Errorf("%s: defaults not filled: %+v", tc.name, tc.c)
		}
	}
	if got := Endpoints(" http://a:1, ,http://b:2,"); len(got) != 2 || got[1] != "http://b:2" {
		t.Fatalf("Endpoints: %q", got)
	}
}

func TestReadMarker(t *testing.T) {
	dir := t.TempDir()
	if _, err := readMarker(filepath.Join(dir, "none")); !errors.Is(err, ErrNoFleet) {
		t.Fatalf("missing marker: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("etcd http://a /klock\n"), 0o644)
	if _, err := readMarker(bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("old-format marker: %v", err)
	}
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(`{"endpoints":["http://a:1"],"prefix":"/f/","host":"h1"}`), 0o644)
	c, err := readMarker(good)
	if err != nil || c.Prefix != "/f" || c.Host != "h1" {
		t.Fatalf("marker: %+v %v", c, err)
	}
}
