package decide

import (
	"errors"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// learnFrom is one permissive learning run of evs under m (src, its bytes,
// may be nil).
func learnFrom(t *testing.T, m *policy.Manifest, src []byte, evs ...event.Event) []byte {
	t.Helper()
	e := New(compile(t, m), policy.ModePermissive, WithClock(fakeClock()))
	observeAll(e, evs...)
	out, err := e.Learned(m, src)
	if err != nil {
		t.Fatalf("Learned: %v\n%s", err, out)
	}
	return out
}

// TestMergeLearnedUnitesRuns: --learn onto a file an earlier learning run
// wrote keeps what both runs needed, each once: the intents of both, the
// comments of each, one header, one marker; a learned intent the other
// run declared wider is dropped, and what the operator wrote stays.
func TestMergeLearnedUnitesRuns(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	first := learnFrom(t, m, nil,
		fileEv(policy.Mutates, "/etc/hosts", "openat"),
		fileEv(policy.Mutates, "/srv/repo/build/a.o", "openat"),
		netEv("192.0.2.7:443", policy.ProtoTCP),
	)
	second := learnFrom(t, m, nil,
		fileEv(policy.Mutates, "/etc/hosts", "openat"),
		fileEv(policy.Mutates, "/srv/repo/build/a.o", "openat"), fileEv(policy.Mutates, "/srv/repo/build/b.o", "openat"),
		fileEv(policy.Mutates, "/srv/repo/build/c.o", "openat"), fileEv(policy.Mutates, "/srv/repo/build/d.o", "openat"),
		execEv("/usr/bin/make"),
	)
	out, err := MergeLearned(first, second)
	if err != nil {
		t.Fatalf("MergeLearned: %v\n%s", err, out)
	}
	s := string(out)
	for want, n := range map[string]int{
		"MUTATES FILE:/etc/hosts # learned":                      1,
		"CONSUMES NET:192.0.2.7:443/tcp # learned":               1,
		"PROVIDES PROC:/usr/bin/make # learned":                  1,
		"MUTATES FILE:${workdir}/build/** # learned: 4 observed": 1,
		"MUTATES FILE:${workdir}/build/a.o":                      0,
		"- CONSUMES FILE:${workdir}/**":                          1,
		learnedMarker:                                            1,
		"# Manifest learned by klock run --learn":                1,
	} {
		if got := strings.Count(s, want); got != n {
			t.Errorf("%q appears %d times, want %d\n%s", want, got, n, s)
		}
	}
	lm, err := policy.Parse("merged.yaml", out)
	if err != nil {
		t.Fatalf("the merge does not parse: %v\n%s", err, s)
	}
	strict := New(compile(t, lm), policy.ModeStrict)
	for _, ev := range []event.Event{netEv("192.0.2.7:443", policy.ProtoTCP), execEv("/usr/bin/make"), fileEv(policy.Mutates, "/srv/repo/build/a.o", "openat")} {
		if v := strict.Observe(ev); v.Action != ActionAllow {
			t.Errorf("merged manifest refuses %s", ev.Triple)
		}
	}

	other := manifestAt(t, "/srv/other", "CONSUMES FILE:${workdir}/**")
	if _, err := MergeLearned(first, learnFrom(t, other, nil, fileEv(policy.Mutates, "/etc/hosts", "openat"))); !errors.Is(err, ErrLearnMerge) {
		t.Errorf("merging the runs of two workdirs: err %v, want ErrLearnMerge", err)
	}
}

// TestLearnedFromALearnedManifest: learning again with a learned manifest
// as -m keeps one header and one marker, and the earlier learned intents
// with their comments.
func TestLearnedFromALearnedManifest(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	first := learnFrom(t, m, nil, fileEv(policy.Mutates, "/etc/hosts", "openat"))
	lm, err := policy.Parse("learned.yaml", first)
	if err != nil {
		t.Fatal(err)
	}
	again := string(learnFrom(t, lm, first, fileEv(policy.Mutates, "/etc/hosts", "openat"), fileEv(policy.Mutates, "/etc/motd", "openat")))
	for want, n := range map[string]int{
		"# Manifest learned by klock run --learn": 1,
		learnedMarker:                       1,
		"MUTATES FILE:/etc/hosts # learned": 1,
		"MUTATES FILE:/etc/motd # learned":  1,
	} {
		if got := strings.Count(again, want); got != n {
			t.Errorf("%q appears %d times, want %d\n%s", want, got, n, again)
		}
	}
}

// TestLearnedIntentsCountsAcrossRuns: the summary's count of what a
// learned file holds counts the learned intents, whichever manifest the
// run was under.
func TestLearnedIntentsCountsAcrossRuns(t *testing.T) {
	m := manifest(t, "permissive", "none", "CONSUMES FILE:/srv/repo/**")
	first := learnFrom(t, m, nil, fileEv(policy.Mutates, "/etc/hosts", "openat"), fileEv(policy.Mutates, "/etc/motd", "openat"))
	lm, err := policy.Parse("learned.yaml", first)
	if err != nil {
		t.Fatal(err)
	}
	again := learnFrom(t, lm, first, fileEv(policy.Mutates, "/etc/issue", "openat"))
	if n, err := CountLearned(lm, again); err != nil || n != 1 {
		t.Errorf("CountLearned = %d, %v; want 1 (this run's)", n, err)
	}
	if n, err := LearnedIntents(again); err != nil || n != 3 {
		t.Errorf("LearnedIntents = %d, %v; want 3 (both runs')", n, err)
	}
}
