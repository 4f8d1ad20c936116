//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestProcessSubstitutionIsClean: bash's <(...) hands the agent /dev/fd/63,
// a link into its own /proc/self/fd. The observer once followed that link
// in its own process and named klock's descriptor 63 (a BPF program:
// "CONSUMES anon_inode:bpf-prog"), killing every strict run of a CLI that
// uses process substitution (Codex's shell tool does) in a session with a
// NET intent, where klock holds more descriptors. It is the agent's own
// pipe: CLEAN. The probe does what bash does (a pipe read back through
// /dev/fd/N, and through /proc/self/fd/N), so this runs where bash is not
// installed too (the VM).
func TestProcessSubstitutionIsClean(t *testing.T) {
	for _, via := range []string{"dev", "proc"} {
		t.Run(via, func(t *testing.T) {
			if _, err := os.Stat("/dev/fd"); err != nil && via == "dev" {
				t.Skipf("no /dev/fd on this system (%v): /proc/self/fd is the same door", err)
			}
			w := harness.NewWorld(t)
			o := w.Run(harness.Spec{
				Intents: append(harness.ProbeIntents(), "CONSUMES NET:127.0.0.1:9/tcp"),
				Command: []string{harness.Probe, "procsub:" + via},
			})
			o.AssertClean(t, 0)
			if got := o.Probe["procsub:"+via]; got != "ok" {
				t.Fatalf("procsub = %q\n%s", got, o.Dump())
			}
			for _, ob := range o.Log.Observed {
				if strings.Contains(ob.Triple, "anon_inode") || strings.Contains(ob.Triple, "pipe:") {
					t.Errorf("observed %s: a descriptor named in the wrong process", ob.Triple)
				}
			}
		})
	}
}

// TestBashDescriptorsLearnThenStrict: the shapes bash gives its
// descriptors (process substitution read by cat and by diff, exec 3< <(...),
// here-strings and here-documents) in a session with a NET intent (its own
// network namespace: klock holds more descriptors), learned in permissive
// mode, then run strict with the learned manifest: CLEAN, and the learned
// manifest names no descriptor of either process (no /proc/self/fd, /dev/fd,
// pipe: or anon_inode object).
func TestBashDescriptorsLearnThenStrict(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this system (the VM's busybox): TestProcessSubstitutionIsClean covers the same doors")
	}
	w := outsideTmpWorld(t)
	script := `set -e
cat <(echo hi)
diff <(echo a) <(echo a)
exec 3< <(echo three)
read -r x <&3
echo "$x"
cat <<< "here-string"
cat <<EOF2
here-doc
EOF2
tr a-z A-Z < <(echo sub) > ` + w.W("out.txt")
	cmd := []string{harness.Real(t, bash), "-c", script}
	base := []byte(harness.ManifestYAML(w.Workdir, policy.ModePermissive, []string{"CONSUMES NET:127.0.0.1:9/tcp"}))
	o := w.Run(harness.Spec{Mode: policy.ModePermissive, Backend: session.BackendObserve, Manifest: base, Command: cmd})
	if o.Res.Killed || o.Res.Exit.ExitCode() != 0 || o.Res.Learned == nil {
		t.Fatalf("learning run failed or learned nothing\n%s", o.Dump())
	}
	for _, bad := range []string{"/proc/self/fd", "/dev/fd", "pipe:", "anon_inode"} {
		if strings.Contains(string(o.Res.Learned), bad) {
			t.Errorf("the learned manifest names a descriptor (%s):\n%s", bad, o.Res.Learned)
		}
	}
	must(t, os.Remove(w.W("out.txt")))
	o2 := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: o.Res.Learned, Command: cmd})
	o2.AssertClean(t, 0)
	if got := w.Content(w.W("out.txt")); got != "SUB\n" {
		t.Errorf("out.txt = %q, want SUB", got)
	}
}

// TestProcSelfPathsNameTheAgentsObjects: paths written through the agent's
// own /proc/self name what they lead to in the agent's process, never the
// literal /proc path (which no intent declares) and never klock's: files
// made, renamed, chmodded and a directory made through a descriptor of
// the workdir (/proc/self/fd/N/NAME, as Claude Code renames its
// temporaries), and a program that runs itself again as /proc/self/exe
// and is gone at once. Strict: CLEAN, each named in the workdir or as the
// probe's binary.
func TestProcSelfPathsNameTheAgentsObjects(t *testing.T) {
	w := harness.NewWorld(t)
	o := w.Run(harness.Spec{
		Intents: append(harness.ProbeIntents(), "PROVIDES FILE:"+w.W("**"), "MUTATES FILE:"+w.W("**"), "RENAMES FILE:"+w.W("**"),
			"CONSUMES NET:127.0.0.1:9/tcp"),
		Command: []string{harness.Probe, "procfd:" + w.Workdir, "selfexe:read:/dev/null", "selfexe:read:/dev/null", "selfexe:read:/dev/null"},
	})
	o.AssertClean(t, 0)
	if got := o.Probe["procfd:"+w.Workdir]; got != "ok" {
		t.Fatalf("procfd = %q\n%s", got, o.Dump())
	}
	for _, ob := range o.Log.Observed {
		if strings.Contains(ob.Triple, "/proc/self/fd/") || strings.Contains(ob.Triple, "/proc/self/exe") {
			t.Errorf("observed %s: named by its /proc/self path, not the object", ob.Triple)
		}
	}
	if _, err := os.Stat(w.W("b")); err != nil {
		t.Errorf("the renamed file: %v", err)
	}
}
