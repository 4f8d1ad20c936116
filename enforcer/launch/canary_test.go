//go:build linux

package launch

import (
	"context"
	"errors"
	"testing"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/internal/testutil"
)

// startCanaried runs /bin/true with the canaries and returns its Process
// (after the agent exited) or Release's error.
func startCanaried(t *testing.T, stage2Path string, c *Canaries, intents ...string) (*Process, error) {
	t.Helper()
	wd := agentDir(t)
	s := Spec{Ruleset: compile(t, wd, append([]string{"PROVIDES PROC:/usr/bin/true"}, intents...)...), Group: newGroup(t), User: agentUser(),
		Args: []string{"/bin/true"}, NewNetNS: true, Stage2: stage2Path, Canaries: c}
	p, err := Start(context.Background(), s)
	if err != nil {
		return nil, err
	}
	if exit, err := p.Wait(); err != nil || exit != (Exit{}) {
		t.Fatalf("agent: %v %v", exit, err)
	}
	return p, nil
}

func canaryByKind(p *Process) map[string]CanaryResult {
	m := map[string]CanaryResult{}
	for _, c := range p.Canaries {
		m[c.Kind] = c
	}
	return m
}

// TestCanariesRefused: under a real Landlock wall, in a namespace with no
// route out, the write and exec canaries are refused by Landlock
// (EACCES), and the connect by Landlock's TCP rights where the kernel
// has them (ABI 4), else by the namespace (ENETUNREACH).
func TestCanariesRefused(t *testing.T) {
	testutil.RequirePrivileged(t)
	p, err := startCanaried(t, "", &Canaries{Strict: true, NetWall: "netns"})
	if err != nil {
		t.Fatal(err)
	}
	got := canaryByKind(p)
	connect := CanaryResult{Kind: "connect", Target: CanaryConnect, Wall: "netns", Refused: true, Errno: "ENETUNREACH"}
	if p.Landlock.HandledNet != 0 {
		connect.Wall, connect.Errno = "landlock", "EACCES"
	}
	for kind, want := range map[string]CanaryResult{
		stage2.CanaryKindWrite:   {Kind: "write", Target: DefaultCanaryDir + "/w", Wall: "landlock", Refused: true, Errno: "EACCES"},
		stage2.CanaryKindExec:    {Kind: "exec", Target: DefaultCanaryDir + "/x", Wall: "landlock", Refused: true, Errno: "EACCES"},
		stage2.CanaryKindConnect: connect,
	} {
		if got[kind] != want {
			t.Errorf("%s canary %+v, want %+v", kind, got[kind], want)
		}
	}
}

// TestCanariesSkipWhatIsAllowed: a scope that covers a canary's object
// skips that canary (its wall is meant to let it through) and says why.
func TestCanariesSkipWhatIsAllowed(t *testing.T) {
	testutil.RequirePrivileged(t)
	p, err := startCanaried(t, "", &Canaries{Strict: true}, "MUTATES FILE:"+DefaultCanaryDir+"/**")
	if err != nil {
		t.Fatal(err)
	}
	got := canaryByKind(p)
	if w := got[stage2.CanaryKindWrite]; w.Skipped == "" || w.Refused {
		t.Errorf("write canary %+v, want skipped", w)
	}
	if x := got[stage2.CanaryKindExec]; !x.Refused {
		t.Errorf("exec canary %+v, want refused", x)
	}
	if _, ok := got[stage2.CanaryKindConnect]; ok {
		t.Errorf("a connect canary without a network wall to prove: %+v", got)
	}
}

// TestCanariesCatchAnUnenforcedRuleset: a klock-stage2 that builds its
// Landlock ruleset and never enforces it (the klocktest_brokenwall test
// build) fails a strict start with ErrWallNotEnforcing before the agent's
// exec; a permissive start runs and reports the canaries let through.
func TestCanariesCatchAnUnenforcedRuleset(t *testing.T) {
	testutil.RequirePrivileged(t)
	broken := buildStage2(t, t.TempDir(), "-tags", "klocktest_brokenwall")
	_, err := startCanaried(t, broken, &Canaries{Strict: true})
	var se *StageError
	if !errors.Is(err, ErrWallNotEnforcing) || !errors.As(err, &se) || se.Step != stage2.StepCanary {
		t.Fatalf("strict start under a broken wall: %v, want a canary StageError (ErrWallNotEnforcing)", err)
	}
	p, err := startCanaried(t, broken, &Canaries{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Canaries {
		if c.Refused || c.Errno != "" {
			t.Errorf("canary %+v, want let through by the broken wall", c)
		}
	}
	if len(p.Canaries) != 2 {
		t.Errorf("canaries %+v, want the write and the exec", p.Canaries)
	}
}
