//go:build linux

package realrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// Run is one `klock run` of a step.
type Run struct {
	Step    string
	Args    []string
	Exit    int
	Err     error // a failure to run klock at all, or the timeout
	Dur     time.Duration
	Stdout  string // the agent's
	Stderr  string // the agent's and klock's (summary, learned-manifest notice)
	Log     *vlog.Log
	LogPath string
	LogErr  error
	Work    string // the workdir
}

// KlockRun runs klock with args in the workdir, keeps its output as
// Dir/<step>.stdout and .stderr, and reads back the session's verification
// log (the only session of this fresh workdir).
func (a *Area) KlockRun(step string, args ...string) *Run {
	a.T.Helper()
	r := &Run{Step: step, Args: args, Work: a.Work}
	ctx, cancel := context.WithTimeout(context.Background(), a.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Klock, args...)
	cmd.Dir = a.Work
	// klock's own environment: the test's, minus what would change klock's
	// behaviour from run to run (a klockd of another engineer's: klock runs
	// its enforcer embedded).
	cmd.Env = append(os.Environ(), "KLOCK_SOCKET="+filepath.Join(a.Dir, "no-klockd.sock"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r.Dur = time.Since(start)
	r.Stdout, r.Stderr = out.String(), errb.String()
	os.WriteFile(filepath.Join(a.Dir, step+".stdout"), out.Bytes(), 0o644)
	os.WriteFile(filepath.Join(a.Dir, step+".stderr"), errb.Bytes(), 0o644)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Exit, r.Err = -1, fmt.Errorf("klock run did not end within %s (killed)", a.Timeout)
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	case err != nil:
		r.Exit, r.Err = -1, err
	}
	logs, _ := filepath.Glob(a.W(".klock", "sessions", "*", vlog.FileName))
	sort.Strings(logs) // session ids start with the time
	if len(logs) == 0 {
		r.LogErr = fmt.Errorf("no verification log under %s", a.W(".klock", "sessions"))
	} else {
		r.LogPath = logs[len(logs)-1]
		r.Log, r.LogErr = vlog.Read(r.LogPath)
	}
	return r
}

// ExitMeaning explains klock run's own exit statuses (docs/cli.md, "Exit
// status").
func ExitMeaning(code int) string {
	switch code {
	case 0:
		return "0: ok"
	case 75:
		return "75: a lease conflict"
	case 113:
		return "113: strict mode killed the session"
	case 125:
		return "125: klock refused or failed to start the session"
	case 130:
		return "130: ended from outside"
	case -1:
		return "klock did not run to its end"
	}
	return fmt.Sprintf("%d: the agent's own exit status", code)
}

// Headline is one line about a run for -v output.
func (r *Run) Headline() string {
	s := fmt.Sprintf("%s: exit %s in %s", r.Step, ExitMeaning(r.Exit), r.Dur.Round(10*time.Millisecond))
	if r.Log != nil {
		s += fmt.Sprintf("; verdict %s; %d events, %d distinct triples, %d violations, %d lost", r.Log.Summary, r.Log.Events, len(r.Log.Observed), len(r.Log.Violations), r.Log.Lost.Total)
	}
	return s
}

// RefusedDeclared are the observed operations a wall refused (EACCES or
// EPERM) although an intent the manifest declares allows them: klock said
// yes and the kernel said no. Baseline-allowed refusals are left out (DAC
// refuses nobody plenty of system files), and so is the masked
// <workdir>/.klock, which klock hides from the agent by design (Gemini
// CLI's file discovery opens it).
func (r *Run) RefusedDeclared() []vlog.Observed {
	if r.Log == nil {
		return nil
	}
	var out []vlog.Observed
	for _, o := range r.Log.Observed {
		_, obj, _ := strings.Cut(o.Triple, " ")
		if strings.HasSuffix(obj, "/.klock") || strings.Contains(obj, "/.klock/") {
			continue
		}
		if o.Blocked > 0 && o.AllowedBy != "" && !o.Baseline {
			out = append(out, o)
		}
	}
	return out
}

// ViolationLine is one violation of the log, for a failure message.
func ViolationLine(v vlog.Violation) string {
	return fmt.Sprintf("violation: %s (%s; action %s, blocked=%v; %s pid %d %s via %s; declared there: %q; would need: %q)",
		v.Triple, v.Error, v.Action, v.Blocked, v.Comm, v.PID, v.Syscall, v.Source, v.Declared, v.Needed)
}

// Problems are the reasons a strict run is not a clean pass as far as
// klock is concerned (a suite's own checks come on top): each one precise
// enough to say what broke.
func (r *Run) Problems() []string {
	var p []string
	if r.Err != nil {
		p = append(p, r.Err.Error())
	}
	if r.Exit != 0 {
		p = append(p, "klock run exited "+ExitMeaning(r.Exit))
	}
	if r.LogErr != nil {
		return append(p, r.LogErr.Error())
	}
	l := r.Log
	if l.Verdict != vlog.VerdictClean {
		p = append(p, fmt.Sprintf("verdict %s, want CLEAN", l.Summary))
	}
	if l.Exit.KilledByKlock {
		p = append(p, "killed by klock: "+l.Exit.Reason)
	}
	// The same violation repeated (pytest truncates its capture file per
	// test) is one line with a count.
	var order []string
	seen := map[string]int{}
	for _, v := range l.Violations {
		line := ViolationLine(v)
		if seen[line] == 0 {
			order = append(order, line)
		}
		seen[line]++
	}
	for _, line := range order {
		if n := seen[line]; n > 1 {
			line += fmt.Sprintf(" ×%d", n)
		}
		p = append(p, line)
	}
	for _, o := range r.RefusedDeclared() {
		p = append(p, fmt.Sprintf("refused by the wall although declared: %s ← %s [%d of %d blocked; %s pid %d %s]",
			o.Triple, o.AllowedBy, o.Blocked, o.Count, o.Comm, o.PID, o.Syscall))
	}
	if l.Lost.Total > 0 {
		p = append(p, fmt.Sprintf("%d kernel events lost", l.Lost.Total))
	}
	return p
}

// Tail is the last n lines of s, indented.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return "    " + strings.Join(lines, "\n    ")
}
