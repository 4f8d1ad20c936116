package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestReadsCountedBelowTheWorkdir: the agent reads every file of a
// workdir directory, all of which one intent allows, then writes one it
// may not. Recorded "counted", the reads the kernel counted after the
// first are listed under the workdir and not one by one, and every read
// is in the intent's uses all the same (none lost, none twice); the
// write is still a violation that kills the session. With --record all,
// each read is its own observed triple and nothing is counted. In
// permissive mode the write amends the scope, which ends the count (a read
// after it is judged under the new rules), and the reads after it are
// all still accounted for.
func TestReadsCountedBelowTheWorkdir(t *testing.T) {
	if harness.LSM() {
		t.Skip("bpf-lsm counts its own repeats; this is the tracepoint backend's recording")
	}
	const n = 200
	for _, c := range []struct {
		all  bool
		mode policy.Mode
	}{{false, policy.ModeStrict}, {true, policy.ModeStrict}, {false, policy.ModePermissive}} {
		all := c.all
		t.Run(fmt.Sprintf("record-all=%v,%s", all, c.mode), func(t *testing.T) {
			w := harness.NewWorld(t)
			dir := w.W("data")
			w.Dir(dir)
			for i := range n {
				w.File(fmt.Sprintf("%s/f%03d", dir, i), "x\n")
			}
			read := "CONSUMES FILE:" + w.Workdir + "/**"
			intents := []string{read, "PROVIDES PROC:" + dash(t), "PROVIDES PROC:" + harness.Real(t, "/usr/bin/cat"),
				"PROVIDES PROC:" + harness.Real(t, "/usr/bin/sleep")}
			// One read, a pause for the session to judge it, then the
			// rest and a write nothing declares.
			script := fmt.Sprintf("cat %[1]s/f000 >/dev/null; sleep 0.5; cat %[1]s/f* >/dev/null; echo y > %[1]s/f001", dir)
			reads := uint64(n + 1)
			if c.mode == policy.ModePermissive {
				// Refused, amended; then every file read again.
				script += fmt.Sprintf("; sleep 0.5; cat %[1]s/f* >/dev/null", dir)
				reads += n
			}
			o := w.Run(harness.Spec{Mode: c.mode, Intents: intents, Command: []string{"/bin/sh", "-c", script}, RecordAll: all})
			if c.mode == policy.ModeStrict {
				if !o.Res.Killed {
					t.Fatalf("session not killed for the write\n%s", o.Dump())
				}
				o.AssertViolation(t, "MUTATES FILE:"+dir+"/f001", dir+"/f001", true)
			} else if o.Violation("MUTATES FILE:"+dir+"/f001") == nil {
				t.Fatalf("the write is not a violation\n%s", o.Dump())
			}
			want := vlog.RecordCounted
			if all {
				want = vlog.RecordAll
			}
			if o.Log.Recording != want {
				t.Errorf("recording %q, want %q", o.Log.Recording, want)
			}
			var listed, counted uint64
			for _, ob := range o.Log.Observed {
				if strings.HasPrefix(ob.Triple, "CONSUMES FILE:"+dir+"/") {
					listed += ob.Count
				}
			}
			for _, c := range o.Log.Counted {
				if c.Dir != w.Workdir || c.AllowedBy != read {
					t.Errorf("counted %+v, want reads below %s allowed by %s", c, w.Workdir, read)
				}
				counted += c.Count
			}
			if listed+counted != reads {
				t.Errorf("%d reads listed + %d counted, want %d\n%s", listed, counted, reads, o.Dump())
			}
			if all && counted != 0 {
				t.Errorf("--record all counted %d reads", counted)
			}
			t.Logf("listed %d, counted %d", listed, counted)
			if !all && counted == 0 {
				t.Logf("nothing counted: the first read was judged after the others ran")
			}
			if uses, _ := o.Use(read); uses < reads {
				t.Errorf("%s used %d times, want at least %d", read, uses, reads)
			}
		})
	}
}
