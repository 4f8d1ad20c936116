package flagfile

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var testKeys = []Key{
	{"log_level", "log-level"},
	{"syscall_linger", "syscall-linger"},
	{"require_signed", "require-signed"},
	{"trust", "trust"},
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type testFlags struct {
	level  string
	linger time.Duration
	signed bool
	trust  list
}

func newFlags(args ...string) (*flag.FlagSet, *testFlags) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := &testFlags{}
	fs.StringVar(&f.level, "log-level", "info", "")
	fs.DurationVar(&f.linger, "syscall-linger", 5*time.Second, "")
	fs.BoolVar(&f.signed, "require-signed", false, "")
	fs.Var(&f.trust, "trust", "")
	if err := fs.Parse(args); err != nil {
		panic(err)
	}
	return fs, f
}

// The file sets what the command line left unset; a list sets a
// repeatable flag once per element; comments and null values set nothing.
func TestApplyFileUnderCommandLine(t *testing.T) {
	fs, f := newFlags("--log-level", "debug")
	data := []byte(`# klockd's settings
log_level: warn        # the command line says debug: it wins
syscall_linger: 2s
require_signed: true
trust:
  - ed25519:AAAA
  - /etc/klock/trusted/a.pub
`)
	s, err := Parse("k.yaml", data, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, "k.yaml", s); err != nil {
		t.Fatal(err)
	}
	if f.level != "debug" || f.linger != 2*time.Second || !f.signed || len(f.trust) != 2 || f.trust[1] != "/etc/klock/trusted/a.pub" {
		t.Fatalf("got %+v", f)
	}
}

func TestEmptyFilesSetNothing(t *testing.T) {
	for _, data := range []string{"", "# only comments\n#log_level: debug\n", "---\n", "log_level:\ntrust: []\n"} {
		fs, f := newFlags()
		s, err := Parse("k.yaml", []byte(data), testKeys)
		if err == nil {
			err = Apply(fs, "k.yaml", s)
		}
		if err != nil || f.level != "info" || f.linger != 5*time.Second || len(f.trust) != 0 {
			t.Fatalf("%q: %+v %v", data, f, err)
		}
	}
}

// Every error names the file, the line and the key, and wraps its
// sentinel (and the flag parser's error for a bad value).
func TestErrorsAreLocated(t *testing.T) {
	for _, c := range []struct {
		data string
		kind error
		want string
	}{
		{"log_level: info\n\nlog_levle: debug\n", ErrUnknownKey, `k.yaml:3: unknown key "log_levle"`},
		{"syscall_linger: 2s\nsyscall_linger: 3s\n", ErrDuplicateKey, `k.yaml:2: duplicate key "syscall_linger"`},
		{"log_level: info\nsyscall_linger: soon\n", ErrBadValue, `k.yaml:2: bad value "syscall_linger": parse error`},
		{"require_signed: maybe\n", ErrBadValue, `k.yaml:1: bad value "require_signed"`},
		{"trust: {a: b}\n", ErrBadValue, `k.yaml:1: bad value "trust": must be a value or a list`},
		{"trust: [[a]]\n", ErrBadValue, `k.yaml:1: bad value "trust": a list's elements`},
		{"- log_level\n", ErrSyntax, `k.yaml:1: not a mapping of settings`},
		{"log_level: [\n", ErrSyntax, `k.yaml: not a mapping of settings: yaml:`},
		{"? [a]\n: b\n", ErrSyntax, `k.yaml:1: not a mapping`},
	} {
		fs, _ := newFlags()
		s, err := Parse("k.yaml", []byte(c.data), testKeys)
		if err == nil {
			err = Apply(fs, "k.yaml", s)
		}
		var fe *Error
		if !errors.Is(err, c.kind) || !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %v starting %q", c.data, err, c.kind, c.want)
		}
	}
}

// A key whose flag the command does not define is the table's mistake,
// reported as an unknown key rather than a panic.
func TestKeyWithoutFlag(t *testing.T) {
	fs, _ := newFlags()
	err := Apply(fs, "k.yaml", []Setting{{Key: "gone", Flag: "gone", Values: []string{"x"}, Line: 4}})
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "k.yaml:4") {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	fs, f := newFlags()
	if err := Load(fs, filepath.Join(dir, "none.yaml"), testKeys, true); err != nil {
		t.Fatalf("optional missing file: %v", err)
	}
	if err := Load(fs, filepath.Join(dir, "none.yaml"), testKeys, false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file asked for: %v", err)
	}
	p := filepath.Join(dir, "k.yaml")
	if err := os.WriteFile(p, []byte("log_level: error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Load(fs, p, testKeys, false); err != nil || f.level != "error" {
		t.Fatalf("%v %q", err, f.level)
	}
}

// Whatever the bytes, Parse returns settings of known keys or an *Error
// of a known kind, and never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"log_level: debug\n", "trust: [a, b]\n", "x: 1\n", "- a\n", "a: [\n", "", "trust:\n  - a\n"} {
		f.Add([]byte(s))
	}
	known := map[string]bool{}
	for _, k := range testKeys {
		known[k.Name] = true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data, testKeys)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.File != "f.yaml" || fe.Line < 0 {
				t.Fatalf("not a located *Error: %v", err)
			}
			for _, k := range []error{ErrSyntax, ErrUnknownKey, ErrDuplicateKey, ErrBadValue} {
				if errors.Is(err, k) {
					return
				}
			}
			t.Fatalf("no known kind: %v", err)
		}
		for _, x := range s {
			if !known[x.Key] || x.Line < 1 {
				t.Fatalf("setting %+v", x)
			}
		}
	})
}
