package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

const learnBase = `apiVersion: klock/v1
agent: {id: learn-cli}
mode: permissive
workdir: /srv/repo
baseline: none
intents:
  - CONSUMES FILE:${workdir}/**
cost_envelope:
  expected_tokens_in: 1000
  max_tokens_in: 2000
  expected_tokens_out: 100
  max_tokens_out: 200
  expected_latency_ms: 1000
  max_latency_ms: 2000
  context_efficiency: 0.7
  expected_cost: "0.10 USD"
  max_cost: "0.20 USD"
`

// TestWriteLearnedMergesAndSummarizes: --learn onto a file an earlier run
// wrote merges the two, and the terminal gets a few lines (what was learned,
// where, how to review it), not the run's every operation.
func TestWriteLearnedMergesAndSummarizes(t *testing.T) {
	m, err := policy.Parse("base.yaml", []byte(learnBase))
	if err != nil {
		t.Fatal(err)
	}
	learned := func(intent string) []byte {
		return []byte(strings.Replace(learnBase, "  - CONSUMES FILE:${workdir}/**\n",
			"  - CONSUMES FILE:${workdir}/**\n  # --- learned by klock run --learn: review before use ---\n  - "+intent+" # learned: seen once\n", 1))
	}
	path := filepath.Join(t.TempDir(), "learned.yaml")
	if err := os.WriteFile(path, learned("MUTATES FILE:/etc/hosts"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res := &session.Result{ID: "20250102T030405-abcdef", Learned: learned("PROVIDES PROC:/usr/bin/make")}
	if err := writeLearned(&out, path, m, "base.yaml", res, false); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MUTATES FILE:/etc/hosts # learned", "PROVIDES PROC:/usr/bin/make # learned"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("merged file lacks %q\n%s", want, got)
		}
	}
	s := out.String()
	if n := strings.Count(s, "\n"); n > 8 {
		t.Errorf("summary of %d lines, want a few\n%s", n, s)
	}
	for _, want := range []string{"1 intent(s)", "2 learned intent(s) there now", "klock log -v -m base.yaml 20250102T030405-abcdef", "klock explain " + path} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q\n%s", want, s)
		}
	}
	out.Reset()
	if err := writeLearned(&out, path, m, "base.yaml", res, true); err != nil || out.Len() != 0 {
		t.Errorf("-q: %v, printed %q", err, out.String())
	}
}

// TestWriteLearnedListsWildcardsToReview: the summary lists, one line
// each with its predicates, every learned wildcard outside the workdir and
// the private /tmp; the host's /tmp as host-wide; the workdir's and the
// private /tmp's not at all.
func TestWriteLearnedListsWildcardsToReview(t *testing.T) {
	for _, tc := range []struct {
		tmp, want, unwanted string
	}{
		{"private", "          PROVIDES, DELETES FILE:/srv/cfg/*\n", "FILE:/tmp/**"},
		{"host", "PROVIDES FILE:/tmp/**   host-wide", "note      /var/tmp/**"},
	} {
		t.Run(tc.tmp, func(t *testing.T) {
			base := strings.Replace(learnBase, "baseline: none\n", "baseline: none\ntmp: "+tc.tmp+"\n", 1)
			m, err := policy.Parse("base.yaml", []byte(base))
			if err != nil {
				t.Fatal(err)
			}
			learned := strings.Replace(base, "  - CONSUMES FILE:${workdir}/**\n", `  - CONSUMES FILE:${workdir}/**
  - PROVIDES FILE:/srv/cfg/* # learned: a temporary file
  - DELETES FILE:/srv/cfg/* # learned: a temporary file
  - PROVIDES FILE:${workdir}/build/** # learned: build
  - PROVIDES FILE:/tmp/** # learned: scratch
  - PROVIDES FILE:/var/tmp/** # learned: scratch
`, 1)
			var out bytes.Buffer
			path := filepath.Join(t.TempDir(), "learned.yaml")
			res := &session.Result{ID: "20250102T030405-abcdef", Learned: []byte(learned)}
			if err := writeLearned(&out, path, m, "base.yaml", res, false); err != nil {
				t.Fatal(err)
			}
			s := out.String()
			for _, want := range []string{tc.want, "marked \"# klock review:\""} {
				if !strings.Contains(s, want) {
					t.Errorf("summary lacks %q\n%s", want, s)
				}
			}
			if strings.Contains(s, tc.unwanted) || strings.Contains(s, "build/**") {
				t.Errorf("summary lists %q or the workdir's\n%s", tc.unwanted, s)
			}
			if tc.tmp == "private" && !strings.Contains(s, "note      /var/tmp/** is the session's private /var/tmp") {
				t.Errorf("summary does not say /var/tmp/** is the private one\n%s", s)
			}
		})
	}
}
