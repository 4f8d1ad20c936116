// Package layout pins the direction of the imports between klock's
// top-level packages: data flows one way, manifest → policy → enforcer
// (and snapshot) → guard → cmd, and a package never reaches back up that
// chain. A new arrow is a reviewed change of the table below, never an
// accident.
package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/klocklabs/klock/"

// allowed: for each top-level area (a directory under the module root;
// internal/<pkg> and test/<pkg> each an area of its own), the areas it may
// import besides itself. internal/* are helpers: each may import policy at
// most (internal/explain renders a ruleset), never enforcer, guard or
// snapshot. test/* may import anything.
var allowed = map[string][]string{
	"policy":   {},
	"snapshot": {"policy", "internal/*"},
	"enforcer": {"policy", "snapshot", "internal/*"},
	"guard":    {"policy", "enforcer", "internal/*"},
	"cmd":      {"policy", "snapshot", "enforcer", "guard", "internal/*"},
	"internal": {"policy", "internal/*"},
	"test":     {"*"},
}

// area is the top-level area of an import path of the module.
func area(p string) string {
	rest := strings.TrimPrefix(p, module)
	parts := strings.Split(rest, "/")
	if (parts[0] == "internal" || parts[0] == "test") && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

func permits(from, to string) bool {
	kind, _, _ := strings.Cut(from, "/")
	rules, ok := allowed[kind]
	if !ok {
		return false
	}
	for _, r := range rules {
		switch {
		case r == "*", r == to:
			return true
		case strings.HasSuffix(r, "/*") && strings.HasPrefix(to, strings.TrimSuffix(r, "*")):
			return true
		}
	}
	return false
}

// TestImportsPointDown reads every package's imports (go list) and fails
// on an arrow the table does not allow.
func TestImportsPointDown(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain here (the VM runs compiled tests): the host's run checks the layout")
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var bad []string
	seen := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		seen++
		from := area(p.ImportPath)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := area(imp)
			if to != from && !permits(from, to) {
				bad = append(bad, p.ImportPath+" imports "+imp+" ("+from+" → "+to+")")
			}
		}
	}
	if seen < 50 {
		t.Fatalf("go list found %d packages: not the module", seen)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("imports that point up the chain (manifest → policy → enforcer, snapshot → guard → cmd):\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestTableCatchesAnUpwardArrow: the checker itself refuses what the
// layering forbids.
func TestTableCatchesAnUpwardArrow(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"policy", "guard", false}, {"policy", "internal/testutil", false}, {"snapshot", "enforcer", false},
		{"enforcer", "guard", false}, {"internal/explain", "enforcer", false}, {"guard", "cmd", false},
		{"enforcer", "policy", true}, {"guard", "enforcer", true}, {"cmd", "internal/version", true}, {"test/e2e", "cmd", true},
	} {
		if got := permits(c.from, c.to); got != c.ok {
			t.Errorf("permits(%s → %s) = %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}
