//go:build linux

package realrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// BinEnv names the klock binary to test instead of one built from this
// tree.
const BinEnv = "KLOCK_BIN"

// AgentUID and AgentGID are the agent's: nobody/nogroup owns every
// workdir, so `klock run` runs the agent as nobody (the owner of the
// workdir) and DAC never refuses it anything there: a refusal can only
// come from klock.
const AgentUID, AgentGID = 65534, 65534

// AgentPATH is klock's PATH for the agent (docs/cli.md: the agent's
// environment).
const AgentPATH = "/usr/local/bin:/usr/bin:/bin"

// Suite names one suite's directories and the variables that move or keep
// them.
type Suite struct {
	Name    string // in the directories' names: klock-<Name>-...
	RootEnv string // where the directories are made (default /srv)
	KeepEnv string // =1: the test's directories are kept for inspection
	// Timeout bounds one `klock run`: a hung agent fails its step, not
	// the whole package.
	Timeout time.Duration
}

var (
	buildOnce sync.Once
	buildDir  string
	klockPath string
	buildErr  error
)

// Main runs the test binary's tests and removes the klock it built; a
// suite's TestMain is os.Exit(realrun.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	return code
}

// RootBase is where the suite makes its directories: $RootEnv, else /srv
// (a workdir where real ones live; not /tmp or /var/tmp, which the agents
// use as scratch space and klock treats specially).
func (s Suite) RootBase() string {
	dir := os.Getenv(s.RootEnv)
	if dir == "" {
		dir = "/srv"
	}
	os.MkdirAll(dir, 0o755)
	return dir
}

// Klock is the klock under test: $KLOCK_BIN, else klock (and its stage 2
// launcher, and klock meter in it) built from this tree once for the test
// binary, so a stale bin/klock is never what is tested.
func (s Suite) Klock(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(BinEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	if _, err := exec.LookPath("go"); err != nil {
		testutil.Unavailable(t, "no go toolchain to build klock (or set "+BinEnv+")")
	}
	buildOnce.Do(func() {
		// Not in /tmp: the agents' learned /tmp/** scope is backed up.
		if buildDir, buildErr = os.MkdirTemp(s.RootBase(), "klock-"+s.Name+"-bin-"); buildErr != nil {
			return
		}
		if buildErr = os.Chmod(buildDir, 0o755); buildErr != nil {
			return
		}
		if _, buildErr = testutil.Build(buildDir, "klock-stage2"); buildErr != nil {
			return
		}
		klockPath, buildErr = testutil.Build(buildDir, "klock")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return klockPath
}

// Root makes the test's directory under RootBase, klock-<Name>-<what>,
// traversable by the agent, removed at the end unless $KeepEnv is 1.
func (s Suite) Root(t *testing.T, what string) string {
	t.Helper()
	pattern := "klock-" + s.Name + "-"
	if what != "" {
		pattern += what + "-"
	}
	root, err := os.MkdirTemp(s.RootBase(), pattern)
	if err != nil {
		t.Fatal(err)
	}
	// The agent must be able to reach its workdir.
	for p := root; p != "/"; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o005 != 0o005 {
			if p == root {
				os.Chmod(p, 0o755)
			} else {
				t.Fatalf("%s (mode %v) is not traversable by the agent user; set %s", p, st.Mode().Perm(), s.RootEnv)
			}
		}
	}
	if os.Getenv(s.KeepEnv) == "1" {
		t.Logf("%s=1: workdirs, manifests and outputs kept under %s", s.KeepEnv, root)
	} else {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("removing %s (set %s=1 to keep it for inspection)", root, s.KeepEnv)
			}
			os.RemoveAll(root)
		})
	}
	return root
}
