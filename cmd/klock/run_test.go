package main

import (
	"slices"
	"strings"
	"testing"
)

// TestParseRunServesOnlyWhatKlockdImplements: the front serves a run
// whose flags klockd implements, reading them as the full CLI does, and
// hands over every other (a flag of the full CLI's alone, help, a value
// the full CLI refuses with its own message).
func TestParseRunServesOnlyWhatKlockdImplements(t *testing.T) {
	for _, c := range []struct {
		args string
		argv []string // nil: not served
	}{
		{"-m m.yaml -- true", []string{"true"}},
		{"-q --mode permissive -m m.yaml -e A=1 -e B --wait 10s -- sh -c 'x'", []string{"sh", "-c", "'x'"}},
		{"--manifest=m.yaml --user 1000 --backend landlock --keep-tmp -- ls -la", []string{"ls", "-la"}},
		{"-m m.yaml --learn out.yaml -- true", nil},
		{"-m m.yaml --no-daemon -- true", nil},
		{"-m m.yaml --require-signed -- true", nil},
		{"-m m.yaml --gateway /run/gw.sock -- true", nil},
		{"-m m.yaml --backend observe -- true", nil},
		{"-m m.yaml --mode lenient -- true", nil},
		{"-m m.yaml --user alice -- true", nil},
		{"-m m.yaml", nil},
		{"-- true", nil},
		{"--help", nil},
		{"-h -m m.yaml -- true", nil},
	} {
		f, ok := parseRun(strings.Fields(c.args))
		switch {
		case c.argv == nil && ok:
			t.Errorf("klock run %s: served, want it handed to the full CLI", c.args)
		case c.argv != nil && !ok:
			t.Errorf("klock run %s: handed over, want it served", c.args)
		case ok && !slices.Equal(f.argv, c.argv):
			t.Errorf("klock run %s: agent %q, want %q", c.args, f.argv, c.argv)
		}
	}
	f, _ := parseRun(strings.Fields("-q -m m.yaml -e A=1 -e B --wait 10s --rollback-on-interrupt -- true"))
	if !f.Quiet || f.Manifest != "m.yaml" || !slices.Equal(f.Env, []string{"A=1", "B"}) || f.Wait.String() != "10s" || !f.RollbackOnInterrupt {
		t.Errorf("flags read: %+v", f.Flags)
	}
}
