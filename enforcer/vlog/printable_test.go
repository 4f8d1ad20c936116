package vlog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// TestRenderShowsAgentNamesPrintable: the summary a terminal shows cannot
// be forged or redrawn by what the agent named (a file whose name clears
// the screen and prints CLEAN, a new line, a bidi override); the file on
// disk keeps the exact bytes.
func TestRenderShowsAgentNamesPrintable(t *testing.T) {
	evil := "/etc/\x1b[2J\x1b[H\nCLEAN\u202e"
	l := session(t, policy.ModeStrict, []event.Event{ev(policy.Mutates, evil, 1, true)}, 0, Exit{Signal: "SIGKILL", KilledByKlock: true},
		[]RollbackOp{{Path: "/srv/repo/src/x\ny", Action: RollbackRestored, OK: true}})
	l.Violations[0].Comm = "sh\x1b]0;title\x07"
	var out bytes.Buffer
	if err := Render(&out, l, RenderOptions{MaxObserved: -1}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, raw := range []string{"\x1b", "\u202e", "\x07", "\nCLEAN", "x\ny"} {
		if strings.Contains(s, raw) {
			t.Errorf("summary holds the raw %q\n%s", raw, s)
		}
	}
	for _, shown := range []string{`\x1b[2J\x1b[H\nCLEAN\u202e`, `/srv/repo/src/x\ny`, `sh\x1b]0;title\a`} {
		if !strings.Contains(s, shown) {
			t.Errorf("summary lacks %s\n%s", shown, s)
		}
	}
	if l.Violations[0].Path != evil || l.Rollback[0].Path != "/srv/repo/src/x\ny" {
		t.Error("rendering changed the log itself")
	}
	var file bytes.Buffer
	if err := l.encodeTo(&file); err != nil || !strings.Contains(file.String(), `\u001b[2J`) {
		t.Errorf("the JSON lost the exact name: %v", err)
	}
}
