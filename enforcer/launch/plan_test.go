//go:build linux

package launch

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/policy"
)

// planTree is a workdir with a file, a subdirectory and nothing else.
func planTree(t *testing.T) string {
	wd := t.TempDir()
	if err := os.MkdirAll(filepath.Join(wd, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "a.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return wd
}

func ruleAt(plan *LandlockPlan, path string) (WallRule, bool) {
	for _, r := range plan.Rules {
		if r.Path == path {
			return r, true
		}
	}
	return WallRule{}, false
}

func residualFor(plan *LandlockPlan, object string) []Residual {
	var out []Residual
	for _, r := range plan.Residuals {
		if r.Object == object {
			out = append(out, r)
		}
	}
	return out
}

// TestPlanPlacement checks where each kind of declared rule lands, with
// which rights, and which residual it leaves (baseline: none, so only the
// declared rule is in the plan).
func TestPlanPlacement(t *testing.T) {
	wd := planTree(t)
	read := rRead | rReadDir
	for _, c := range []struct {
		intent   string
		wall     string // "" when no rule may be placed
		rights   FSRights
		dir      bool
		residual ResidualKind // "" for an exact wall
	}{
		{"CONSUMES FILE:${workdir}/**", wd, read, true, ""},
		{"CONSUMES FILE:${workdir}/a.txt", wd + "/a.txt", rRead, false, ""},
		{"MUTATES FILE:${workdir}/a.txt", wd + "/a.txt", rRead | rWrite | rTruncate | rIoctlDev, false, ""},
		{"CONSUMES FILE:${workdir}/src/*", wd + "/src", read, true, Widened},
		{"CONSUMES FILE:${workdir}/src", wd + "/src", rReadDir, true, Widened},
		{"PROVIDES FILE:${workdir}/build/**", wd, rMake | rRefer | rWrite | rTruncate | rRead, true, Widened},
		{"PROVIDES FILE:${workdir}/new.txt", wd, rMake | rRefer | rWrite | rTruncate | rRead, true, Widened},
		{"DELETES FILE:${workdir}/a.txt", wd, rRemoveFile, true, Widened},
		{"DELETES FILE:${workdir}/src/**", wd + "/src", rRemoveFile | rRemoveDir, true, Widened}, // removing src itself: REMOVE_DIR on wd
		// Missing, and nothing declared lets the agent make it: nothing to
		// wall (TestPlanMissingRootTheAgentMakes has the other case).
		{"CONSUMES FILE:${workdir}/missing.txt", "", 0, false, Narrowed},
		{"DELETES FILE:${workdir}/gone/**", "", 0, false, Narrowed},
		{"PROVIDES PROC:/usr/bin/true", "/usr/bin/true", rExec | rRead, false, ""},
	} {
		t.Run(c.intent, func(t *testing.T) {
			plan, rs := planFor(t, wd, c.intent)
			obj := rs.Intents[0].Object.String()
			if c.wall == "" {
				if len(plan.Rules) != 0 {
					t.Errorf("rules %+v, want none", plan.Rules)
				}
			} else if r, ok := ruleAt(plan, c.wall); !ok || r.Rights != c.rights || r.Dir != c.dir {
				t.Errorf("rule at %s: got %+v (found %v), want rights %s dir %v; all: %+v", c.wall, r, ok, c.rights, c.dir, plan.Rules)
			}
			res := residualFor(plan, obj)
			switch {
			case c.residual == "" && len(res) != 0:
				t.Errorf("want an exact wall, got residuals %v", res)
			case c.residual != "" && (len(res) == 0 || res[0].Kind != c.residual):
				t.Errorf("want a %s residual for %s, got %v", c.residual, obj, res)
			}
		})
	}
}

func TestPlanSpecialCases(t *testing.T) {
	wd := planTree(t)
	t.Run("proc self is the session's /proc", func(t *testing.T) {
		plan, err := PlanLandlock(compile(t, wd), 7)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := ruleAt(plan, "/proc"); !ok || r.Rights != rRead|rReadDir {
			t.Errorf("/proc rule %+v %v", r, ok)
		}
		if res := residualFor(plan, "FILE:/proc/self/**"); len(res) != 1 || res[0].Kind != Widened || res[0].Wall != "/proc" {
			t.Errorf("residual %v", res)
		}
		if real, err := filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2"); err == nil {
			// No rule path holds a link: the loader's rule is on its file.
			if r, ok := ruleAt(plan, real); !ok || r.Rights != rExec|rRead {
				t.Errorf("interpreter rule at %s: %+v %v", real, r, ok)
			}
		}
		for _, r := range plan.Rules {
			if l := (&planner{kinds: map[string]fs.FileMode{}, fs: hostFS{}}).linkOnPath(r.Path); l != "" {
				t.Errorf("rule %s goes through the link %s", r.Path, l)
			}
		}
	})
	t.Run("widening a write right to / is refused", func(t *testing.T) {
		rs := compile(t, wd, "PROVIDES FILE:/klock-no-such-dir/**")
		if _, err := PlanLandlock(rs, 7); !errors.Is(err, ErrUnexpressible) || !strings.Contains(err.Error(), "/klock-no-such-dir/**") {
			t.Errorf("got %v, want ErrUnexpressible naming the pattern", err)
		}
	})
	t.Run("a subtree root outside the workdir stays", func(t *testing.T) {
		// DELETES FILE:/x/** would need REMOVE_DIR on /x's parent for /x
		// itself: on / (refused before) or beside the workdir. Narrowed.
		other := t.TempDir()
		for _, root := range []string{"/tmp", wd, other} {
			rs := compile(t, wd, "DELETES FILE:"+root+"/**", "RENAMES FILE:"+root+"/**")
			plan, err := PlanLandlock(rs, 7)
			if err != nil {
				t.Fatalf("%s: %v", root, err)
			}
			if r, ok := ruleAt(plan, filepath.Dir(root)); ok && r.Rights&(rRemoveDir|rRefer) != 0 {
				t.Errorf("%s: rule on its parent %+v", root, r)
			}
			if r, ok := ruleAt(plan, root); !ok || r.Rights&(rRemoveFile|rRemoveDir) != rRemoveFile|rRemoveDir || !r.Dir {
				t.Errorf("%s: rule %+v %v, want removals below it", root, r, ok)
			}
			if !hasReason(plan, Narrowed, root+" itself") {
				t.Errorf("%s: no narrowed residual: %v", root, plan.Residuals)
			}
		}
	})
	t.Run("links", func(t *testing.T) {
		// A declared path through a link the agent could have made walls
		// nothing (a rule opens its path, following links); through one
		// root made, the rule is at the target.
		other := t.TempDir()
		secret := filepath.Join(other, "secret")
		if err := os.WriteFile(secret, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(secret, filepath.Join(wd, "planted")); err != nil {
			t.Fatal(err)
		}
		// Root's link outside the workdir (inside it, no link is trusted).
		rootmade := filepath.Join(other, "rootmade")
		if err := os.Symlink(secret, rootmade); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(other, filepath.Join(wd, "planted-dir")); err != nil {
			t.Fatal(err)
		}
		for _, l := range []string{"planted", "planted-dir"} {
			if err := os.Lchown(filepath.Join(wd, l), 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		rs := compile(t, wd, "MUTATES FILE:${workdir}/planted", "MUTATES FILE:${workdir}/planted-dir/secret", "MUTATES FILE:"+rootmade)
		plan, err := PlanLandlock(rs, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{wd + "/planted", wd + "/planted-dir/secret", rootmade} {
			if r, ok := ruleAt(plan, p); ok {
				t.Errorf("rule at the link path %s: %+v", p, r)
			}
		}
		if r, ok := ruleAt(plan, secret); !ok || r.Rights&rWrite == 0 {
			t.Errorf("root's link: no write rule at its target %s: %+v %v", secret, r, ok)
		}
		for obj, kind := range map[string]ResidualKind{"FILE:" + wd + "/planted": Narrowed, "FILE:" + wd + "/planted-dir/secret": Narrowed, "FILE:" + rootmade: Widened} {
			if res := residualFor(plan, obj); len(res) != 1 || res[0].Kind != kind {
				t.Errorf("%s: residuals %v, want one %s", obj, res, kind)
			}
		}
		for _, l := range []string{"planted", "planted-dir"} {
			os.Remove(filepath.Join(wd, l))
		}
	})
	t.Run("the example manifests plan", func(t *testing.T) {
		// Every example a newcomer is pointed at must be runnable, not just
		// valid: coding-agent.yaml's DELETES FILE:/tmp/** was refused.
		ms, err := filepath.Glob("../../examples/manifests/*.yaml")
		if err != nil || len(ms) == 0 {
			t.Fatalf("examples: %v %v", ms, err)
		}
		for _, path := range ms {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			m, err := policy.Parse(path, data)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			m.Workdir = planTree(t) // the examples' /srv/repo need not exist here
			rs, err := policy.Compile(m)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if _, err := PlanLandlock(rs, 7); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		}
	})
	t.Run("no Landlock", func(t *testing.T) {
		if _, err := PlanLandlock(compile(t, wd), 0); !errors.Is(err, ErrNoLandlock) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("lower ABIs handle fewer rights and say so", func(t *testing.T) {
		rs := compile(t, wd, "RENAMES FILE:${workdir}/src/**", "PROVIDES FILE:${workdir}/src/**")
		p1, err := PlanLandlock(rs, 1)
		if err != nil {
			t.Fatal(err)
		}
		if p1.HandledFS&(rRefer|rTruncate) != 0 || p1.HandledNet != 0 || p1.Scoped != 0 {
			t.Errorf("ABI 1 handles %s net %s scoped %d", p1.HandledFS, p1.HandledNet, p1.Scoped)
		}
		for _, r := range p1.Rules {
			if r.Rights&^p1.HandledFS != 0 {
				t.Errorf("rule %+v grants rights ABI 1 does not handle", r)
			}
		}
		if !hasReason(p1, Narrowed, "no REFER") || !hasReason(p1, Unmediated, "truncate") {
			t.Errorf("ABI 1 residuals miss REFER/truncate: %v", p1.Residuals)
		}
		p7, _ := PlanLandlock(rs, 7)
		if p7.HandledFS != 1<<16-1 || hasReason(p7, Narrowed, "no REFER") {
			t.Errorf("ABI 7 handles %s", p7.HandledFS)
		}
	})
	t.Run("TCP ports at ABI 4", func(t *testing.T) {
		rs := compile(t, wd, "CONSUMES NET:api.example.com:443", "PROVIDES NET:127.0.0.1:8080", "CONSUMES NET:10.0.0.0/8:*")
		plan, err := PlanLandlock(rs, 4)
		if err != nil {
			t.Fatal(err)
		}
		want := []PortRule{{Port: 8080, Rights: 1}}
		if !reflect.DeepEqual(plan.Ports, want) || plan.HandledNet != 1 {
			t.Errorf("ports %+v handled %s; want only bind 8080 handled (connect to every port is declared)", plan.Ports, plan.HandledNet)
		}
		rs = compile(t, wd, "CONSUMES NET:api.example.com:443")
		plan, _ = PlanLandlock(rs, 4)
		if !reflect.DeepEqual(plan.Ports, []PortRule{{Port: 443, Rights: 2}}) || plan.HandledNet != 3 {
			t.Errorf("ports %+v handled %s", plan.Ports, plan.HandledNet)
		}
		if res := residualFor(plan, "NET:api.example.com:443"); len(res) != 1 || res[0].Kind != Widened {
			t.Errorf("host residual %v", res)
		}
	})
	t.Run("plan survives the pipe to stage 2", func(t *testing.T) {
		plan, err := PlanLandlock(compile(t, wd, "MUTATES FILE:${workdir}/**", "CONSUMES NET:api.example.com:443"), 7)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(plan.wall())
		if err != nil {
			t.Fatal(err)
		}
		var back stage2.Wall
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&back, plan.wall()) || len(back.Rules) == 0 || len(back.Ports) == 0 {
			t.Errorf("round trip changed the wall:\n%+v\n%+v", back, *plan.wall())
		}
	})
	t.Run("right names are the kernel's bits", func(t *testing.T) {
		for name, r := range map[string]FSRights{"READ_FILE": rRead, "EXECUTE": rExec, "REFER": rRefer, "TRUNCATE": rTruncate,
			"IOCTL_DEV": rIoctlDev, "RESOLVE_UNIX": rResolveUnx, "MAKE_BLOCK": FSRights(ll.AccessFSMakeBlock)} {
			if r.String() != name {
				t.Errorf("%#x is %s, want %s", uint64(r), r, name)
			}
		}
		if got := handledNetTCP(4).String(); got != "BIND_TCP|CONNECT_TCP" {
			t.Errorf("TCP rights are %s", got)
		}
	})
}

func hasReason(p *LandlockPlan, k ResidualKind, sub string) bool {
	for _, r := range p.Residuals {
		if r.Kind == k && strings.Contains(r.Reason, sub) {
			return true
		}
	}
	return false
}

// TestPlanMissingRootTheAgentMakes: rules on paths the agent makes during
// the session (git's .git/**, a build's out/*) are walled at the nearest
// existing directory, not dropped (`mkdir -p sub && mv
// sub/a.tmp sub/a` was refused under a declared RENAMES FILE:sub/**).
func TestPlanMissingRootTheAgentMakes(t *testing.T) {
	wd := planTree(t)
	plan, rs := planFor(t, wd, "PROVIDES FILE:${workdir}/**", "DELETES FILE:${workdir}/gone/**",
		"RENAMES FILE:${workdir}/gone/**", "PROVIDES PROC:${workdir}/build/*")
	r, ok := ruleAt(plan, wd)
	if want := rRemoveFile | rRemoveDir | rRefer | rExec | rRead; !ok || r.Rights&want != want || !r.Dir {
		t.Fatalf("rule at %s: %+v (found %v), want at least %s; all %+v", wd, r, ok, want, plan.Rules)
	}
	for _, i := range []int{1, 2, 3} {
		obj := rs.Intents[i].Object.String()
		res := residualFor(plan, obj)
		if len(res) == 0 || res[0].Kind != Widened || !strings.Contains(res[0].Reason, "detects, kills and rolls back") {
			t.Errorf("%s: want a widened residual that says the observer decides, got %v", obj, res)
		}
	}
}

// TestPlanSettle: a rule on an inode the declaration lets the agent replace
// moves up to a directory it cannot (make clean && make: the execute rule
// stayed on the first build/ and the rebuilt program could not run); a rule
// on one it may remove but not make again stays.
func TestPlanSettle(t *testing.T) {
	wd := planTree(t)
	for _, d := range []string{"build", "trash"} {
		if err := os.MkdirAll(filepath.Join(wd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plan, _ := planFor(t, wd, "CONSUMES FILE:${workdir}/**", "PROVIDES FILE:${workdir}/build/**",
		"DELETES FILE:${workdir}/build/**", "PROVIDES PROC:${workdir}/build/*", "DELETES FILE:${workdir}/trash/**",
		"MUTATES FILE:${workdir}/a.txt")
	if _, ok := ruleAt(plan, filepath.Join(wd, "build")); ok {
		t.Errorf("a rule stayed on build/, which the agent may remove and make again: %+v", plan.Rules)
	}
	r, _ := ruleAt(plan, wd)
	if want := rExec | rMake | rRemoveDir; r.Rights&want != want {
		t.Errorf("rule at the workdir %+v, want build's rights (%s) there", r, want)
	}
	if r, ok := ruleAt(plan, filepath.Join(wd, "trash")); !ok || r.Rights&rRemoveFile == 0 {
		t.Errorf("trash may be removed but not made again: its rule must stay, got %+v (found %v)", r, ok)
	}
	// a.txt: MUTATES, and REMOVE_FILE on its directory (build's rights
	// moved there): renaming a file over it is writing it, so it moves.
	if _, ok := ruleAt(plan, filepath.Join(wd, "a.txt")); ok {
		t.Errorf("a.txt may be replaced by a rename over it: its rule must move to the workdir; %+v", plan.Rules)
	}
	if r.Rights&rWrite == 0 {
		t.Errorf("the workdir rule lacks a.txt's WRITE_FILE: %+v", r)
	}
}

func planFor(t *testing.T, wd string, intents ...string) (*LandlockPlan, *policy.Ruleset) {
	t.Helper()
	m, err := policy.Parse("t.yaml", []byte(strings.Replace(manifestYAML(wd, intents), "system-ro", "none", 1)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := PlanLandlock(rs, 7)
	if err != nil {
		t.Fatal(err)
	}
	return plan, rs
}

// TestPlanRefuses: which refusals are the wall's (a declared
// operation the wall refused must not read CLEAN).
func TestPlanRefuses(t *testing.T) {
	wd := planTree(t)
	plan, _ := planFor(t, wd, "CONSUMES FILE:${workdir}/a.txt", "PROVIDES FILE:${workdir}/src/*", "DELETES FILE:${workdir}/src/**",
		"PROVIDES PROC:/usr/bin/true")
	for _, c := range []struct {
		t       policy.Triple
		syscall string
		want    bool
	}{
		{policy.FileTriple(policy.Consumes, wd+"/a.txt"), "openat", false},
		{policy.FileTriple(policy.Consumes, wd+"/b.txt"), "openat", true},
		{policy.FileTriple(policy.Mutates, wd+"/a.txt"), "openat", true},
		{policy.FileTriple(policy.Mutates, wd+"/a.txt"), "fchmodat", false}, // metadata: never Landlock's
		{policy.FileTriple(policy.Provides, wd+"/src/x/y.go"), "openat", false},
		{policy.FileTriple(policy.Provides, wd+"/new.txt"), "openat", true},
		{policy.FileTriple(policy.Deletes, wd+"/src/x"), "unlinkat", false},
		{policy.ExecTriple("/usr/bin/true"), "execve", false},
		{policy.ExecTriple("/usr/bin/id"), "execve", true},
	} {
		if got := plan.Refuses(c.t, c.syscall); got != c.want {
			t.Errorf("Refuses(%s, %s) = %v, want %v", c.t, c.syscall, got, c.want)
		}
	}
}

// TestPlanExact: the wall is exact for a predicate when every rule that
// grants making (or removing) names is on a directory whose whole tree the
// manifest declares for it; a glob, or a subtree whose own removal widens
// the wall to its parent, is not.
func TestPlanExact(t *testing.T) {
	wd := planTree(t)
	for _, c := range []struct {
		intents                    []string
		provides, deletes, renames bool
	}{
		{[]string{"PROVIDES FILE:${workdir}/**", "DELETES FILE:${workdir}/**"}, true, true, false},
		{[]string{"PROVIDES FILE:${workdir}/**", "RENAMES FILE:${workdir}/**", "DELETES FILE:${workdir}/**"}, true, true, true},
		// src/ exists: the rule is on it, no wider.
		{[]string{"PROVIDES FILE:${workdir}/src/**"}, true, true, true},
		// A rule covers a whole hierarchy: src/* is walled as src/**.
		{[]string{"PROVIDES FILE:${workdir}/src/*"}, false, true, true},
		// Removing src/ itself is a right on the workdir, which Landlock
		// grants over every name there: wider than src/**.
		{[]string{"DELETES FILE:${workdir}/src/**"}, true, false, false},
		{[]string{"CONSUMES FILE:${workdir}/**"}, true, true, true}, // nothing made or removed anywhere
	} {
		plan, rs := planFor(t, wd, c.intents...)
		for _, p := range []struct {
			pred policy.Predicate
			want bool
		}{{policy.Provides, c.provides}, {policy.Deletes, c.deletes}, {policy.Renames, c.renames}} {
			if got := plan.Exact(p.pred, rs); got != p.want {
				t.Errorf("%v: Exact(%s) = %v, want %v\n%+v", c.intents, p.pred, got, p.want, plan.Rules)
			}
		}
	}
	var none *LandlockPlan
	if none.Exact(policy.Provides, nil) {
		t.Error("no plan: Exact = true")
	}
	if plan, rs := planFor(t, wd, "PROVIDES FILE:${workdir}/**"); plan.Exact(policy.Mutates, rs) {
		t.Error("Exact(MUTATES) = true: only making, removing and renaming names are")
	}
}
