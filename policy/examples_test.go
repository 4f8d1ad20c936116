package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var expectRe = regexp.MustCompile(`(?m)^# expect: (\S+) (\S+):(\d+):(\d+)$`)

// Every invalid example names, in its header, the error code, field and
// position its first error must have.
func TestInvalidExamplesRejectedPrecisely(t *testing.T) {
	files, _ := filepath.Glob("../examples/manifests/invalid/*.yaml")
	if len(files) < 20 {
		t.Fatalf("want at least 20 invalid examples, found %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m := expectRe.FindSubmatch(data)
			if m == nil {
				t.Fatalf("%s has no '# expect: CODE FIELD:LINE:COL' header", f)
			}
			_, err = Parse(f, data)
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("want a *ValidationError, got %v", err)
			}
			d := ve.Diags[0]
			field := d.Field
			if field == "" {
				field = "-"
			}
			got := fmt.Sprintf("%s %s:%d:%d", d.Code, field, d.Pos.Line, d.Pos.Col)
			want := fmt.Sprintf("%s %s:%s:%s", m[1], m[2], m[3], m[4])
			if got != want {
				t.Fatalf("first error %q\n got  %s\n want %s", d, got, want)
			}
			if d.Pos.File != f || d.Problem == "" {
				t.Fatalf("diagnostic lacks file or problem: %+v", d)
			}
			if !strings.HasPrefix(d.String(), fmt.Sprintf("%s:%d:%d: ", f, d.Pos.Line, d.Pos.Col)) {
				t.Fatalf("message does not start with file:line:col: %s", d)
			}
		})
	}
}

func TestValidExamples(t *testing.T) {
	files, _ := filepath.Glob("../examples/manifests/*.yaml")
	if len(files) < 3 {
		t.Fatalf("want the refund, coding and trifecta examples, found %v", files)
	}
	for _, f := range files {
		m, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := Compile(m); err != nil {
			t.Errorf("%s: compile: %v", f, err)
		}
	}
}

// Seed 002's matrix, row by row.
func TestRefundAgentMatrix(t *testing.T) {
	m, err := Load("../examples/manifests/refund-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ tool, effect, idem, rollback, unsup, approval string }{
		{"get_account", "READ", "n/a", "n/a", "always", "never"},
		{"get_transactions", "READ", "n/a", "n/a", "always", "never"},
		{"draft_email", "REVERSIBLE-WRITE", "yes", "discard draft", "always", "never"},
		{"send_email", "IRREVERSIBLE-WRITE", "no", "none", "never", "always"},
		{"issue_refund", "REVERSIBLE-WRITE (24h)", "key", "void_refund", `amount_usd <= 50 && context.account.tier != "enterprise"`, "else yes"},
		{"change_plan", "REVERSIBLE-WRITE (30d)", "key", "revert_plan", "never", "always"},
		{"delete_account", "IRREVERSIBLE-WRITE", "no", "none", "never", "always"},
	}
	rows := m.PermissionsMatrix()
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		got := []string{r.Tool, r.SideEffectLabel(), r.Idempotent, r.Rollback, r.Unsupervised, r.ApprovalNeeded}
		exp := []string{w.tool, w.effect, w.idem, w.rollback, w.unsup, w.approval}
		if strings.Join(got, "|") != strings.Join(exp, "|") {
			t.Errorf("row %d\n got  %q\n want %q", i, got, exp)
		}
	}
	if mode, _ := m.EffectiveHITL(); mode != HITLModeHOTL {
		t.Errorf("refund agent has no trifecta and maintainer approval: want HOTL, got %s", mode)
	}
}

func TestTrifectaForcesHITL(t *testing.T) {
	m, err := Load("../examples/manifests/trifecta-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tri := m.Trifecta()
	if !tri.Present || tri.Untrusted != "read_inbox" || tri.Private != "crm_lookup" || tri.External != "post_webhook" {
		t.Fatalf("trifecta = %+v", tri)
	}
	if mode, why := m.EffectiveHITL(); mode != HITLModeHITL || !strings.Contains(why, "trifecta") {
		t.Fatalf("want HITL forced, got %s (%s)", mode, why)
	}
	var warned bool
	for _, w := range m.Warnings {
		if w.Code == "trifecta" && strings.Contains(w.Problem, "read_inbox") && strings.Contains(w.Problem, "crm_lookup") && strings.Contains(w.Problem, "post_webhook") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning naming the three tools: %v", m.Warnings)
	}
	for _, r := range m.PermissionsMatrix() {
		if r.Tool == "post_webhook" && !strings.HasPrefix(r.ApprovalNeeded, "always") {
			t.Fatalf("post_webhook must need approval under forced HITL: %+v", r)
		}
	}
}
