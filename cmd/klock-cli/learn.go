package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// writeLearned writes a learning run's manifest to path, merged with what
// an earlier run wrote there (decide.MergeLearned), and prints the run's
// summary: its verdict, how many intents it learned, where they are and
// how to review them. The detail (every operation and the intent that
// allowed it) is in klock log -v, not on the terminal: a learning run of a
// build amends the scope thousands of times.
func writeLearned(w io.Writer, path string, m *policy.Manifest, manifestPath string, res *session.Result, quiet bool) error {
	if res.Learned == nil {
		return errors.New("no learned manifest: the session was not permissive, or learning failed (the warning above says why)")
	}
	out, merged := res.Learned, false
	prev, err := os.ReadFile(path)
	switch {
	case err == nil:
		if out, err = decide.MergeLearned(prev, res.Learned); err != nil {
			return fmt.Errorf("--learn %s: %w (this run's manifest was not written; move %s away to write it alone)", path, err, path)
		}
		merged = true
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--learn: read %s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write --learn output: %w", err)
	}
	if quiet {
		return nil
	}
	run, _ := decide.CountLearned(m, res.Learned)
	all, _ := decide.LearnedIntents(out)
	if res.Log != nil {
		_, headline := res.Log.Headline()
		fmt.Fprintf(w, "\n%s\nsession   %s, %s\n", headline, res.ID, exitSummary(res.Log))
	}
	switch {
	case merged:
		fmt.Fprintf(w, "learned   %d intent(s) beyond %s's, merged into %s: %d learned intent(s) there now\n", run, manifestPath, path, all)
	default:
		fmt.Fprintf(w, "learned   %d intent(s) beyond %s's, written to %s\n", run, manifestPath, path)
	}
	printReview(w, path, out)
	fmt.Fprintf(w, "review    klock log -v -m %s %s   every operation, and the intent that allowed it\n", manifestPath, res.ID)
	fmt.Fprintf(w, "          klock explain %s   what the learned manifest permits\n", path)
	fmt.Fprintf(w, "then      klock run -m %s -- ...   strict, once reviewed\n", path)
	return nil
}

// exitSummary is how the agent ended, in the log's words.
func exitSummary(l *vlog.Log) string {
	switch {
	case l.Exit.Signal != "":
		return "ended by " + l.Exit.Signal
	case l.Exit.Code != nil:
		return fmt.Sprintf("exit code %d", *l.Exit.Code)
	}
	return "exit unknown"
}

// printReview lists the learned wildcards that reach outside the workdir
// and the private /tmp (decide.ReviewLearned), one line each with its
// predicates: what a review must look at first. The file marks each one.
func printReview(w io.Writer, path string, out []byte) {
	r, err := decide.ReviewLearned(out)
	if err != nil {
		fmt.Fprintf(w, "wildcards not listed: %v\n", err)
		return
	}
	if n := len(r.Wildcards); n > 0 {
		fmt.Fprintf(w, "wildcards %d learned outside the workdir and the private /tmp, marked \"# klock review:\" in %s:\n", n, path)
		for _, it := range r.Wildcards {
			line := fmt.Sprintf("          %s %s", strings.Join(it.Predicates, ", "), it.Object)
			if it.HostTmp {
				line += "   host-wide: the host's temporary directory (tmp: host), shared with every process"
			}
			fmt.Fprintln(w, line)
		}
	}
	if r.PrivateVarTmp {
		fmt.Fprintln(w, "note      /var/tmp/** is the session's private /var/tmp (no variable names it; ${tmpdir} is the private /tmp)")
	}
}
