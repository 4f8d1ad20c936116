package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPlanBoundFS: with binds (a session's private /tmp), the plan looks
// at the private directory for /tmp paths, not at the host's /tmp, and
// names the rules as the agent sees them.
func TestPlanBoundFS(t *testing.T) {
	priv := t.TempDir()
	name := fmt.Sprintf("klock-bound-%d", time.Now().UnixNano())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Only in the private /tmp: "cache"; only in the host's: "hostonly".
	must(os.Mkdir(filepath.Join(priv, name+"-cache"), 0o755))
	hostOnly := filepath.Join(os.TempDir(), name+"-hostonly")
	if os.TempDir() != "/tmp" {
		t.Skipf("the host's temporary directory is %s, not /tmp", os.TempDir())
	}
	must(os.Mkdir(hostOnly, 0o755))
	t.Cleanup(func() { os.Remove(hostOnly) })
	rs := compile(t, agentDirOrTemp(t), "MUTATES FILE:/tmp/"+name+"-cache/**", "PROVIDES FILE:"+hostOnly+"/**")

	host, err := PlanLandlockOn(rs, 7, BoundFS(nil))
	must(err)
	if _, ok := ruleAt(host, "/tmp/"+name+"-cache"); ok {
		t.Errorf("host plan walls /tmp/%s-cache, which the host's /tmp has not", name)
	}
	if _, ok := ruleAt(host, hostOnly); !ok {
		t.Errorf("host plan: no rule on %s: %+v", hostOnly, host.Rules)
	}

	bound, err := PlanLandlockOn(rs, 7, BoundFS([]Bind{{Src: priv, Dst: "/tmp"}}))
	must(err)
	if r, ok := ruleAt(bound, "/tmp/"+name+"-cache"); !ok || !r.Dir {
		t.Errorf("bound plan: no directory rule on /tmp/%s-cache (the private /tmp has it): %+v", name, bound.Rules)
	}
	if _, ok := ruleAt(bound, hostOnly); ok {
		t.Errorf("bound plan walls %s, which only the host's /tmp has", hostOnly)
	}
	if _, ok := ruleAt(bound, "/tmp"); !ok {
		t.Errorf("bound plan: PROVIDES under a path the private /tmp lacks is not walled at /tmp: %+v", bound.Rules)
	}
	for _, r := range bound.Rules {
		if len(r.Path) >= len(priv) && r.Path[:len(priv)] == priv {
			t.Errorf("bound plan names the host path %s", r.Path)
		}
	}
}

// agentDirOrTemp is a workdir outside /tmp's rules.
func agentDirOrTemp(t *testing.T) string {
	d, err := os.MkdirTemp("/var/lib", "klock-launch-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestPlanLearnedTmpScratch: what --learn writes for a private /tmp's
// scratch (every predicate on ${tmpdir}/** and /var/tmp/**) plans on the
// private directories, whatever the ABI: a strict run of a learned
// manifest starts.
func TestPlanLearnedTmpScratch(t *testing.T) {
	var intents []string
	for _, p := range []string{"PROVIDES", "CONSUMES", "MUTATES", "DELETES", "RENAMES"} {
		intents = append(intents, p+" FILE:${tmpdir}/**", p+" FILE:/var/tmp/**")
	}
	rs := compile(t, agentDirOrTemp(t), intents...)
	binds := []Bind{{Src: t.TempDir(), Dst: "/tmp"}, {Src: t.TempDir(), Dst: "/var/tmp"}}
	for abi := 1; abi <= 7; abi++ {
		plan, err := PlanLandlockOn(rs, abi, BoundFS(binds))
		if err != nil {
			t.Fatalf("ABI %d: %v", abi, err)
		}
		for _, d := range []string{"/tmp", "/var/tmp"} {
			if r, ok := ruleAt(plan, d); !ok || !r.Dir {
				t.Errorf("ABI %d: no directory rule on %s: %+v", abi, d, plan.Rules)
			}
		}
	}
}
