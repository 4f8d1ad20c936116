package decide

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// reviewRun makes wildcards in the workdir, in a tool's directory outside
// it, in a home's tool state and in /tmp and /var/tmp.
func reviewRun() []event.Event {
	return []event.Event{
		fileEv(policy.Provides, "/srv/repo/build/a.o", "openat"),
		fileEv(policy.Provides, "/srv/cfg/settings.json.tmp.12345", "openat"),
		renameEv("/srv/cfg/settings.json.tmp.12345", "/srv/cfg/settings.json", true),
		fileEv(policy.Provides, "/home/dev/.npm/_logs/1-debug.log", "openat"),
		fileEv(policy.Provides, "/tmp/go-build1", "mkdirat"), fileEv(policy.Provides, "/tmp/go-build1/x", "openat"),
		fileEv(policy.Provides, "/var/tmp/note", "openat"),
	}
}

// TestReviewLearnedListsWildcards: every wildcard the learner writes
// outside the workdir and the private /tmp is listed with its predicates
// and commented in the file; the host's /tmp is listed as host-wide; the
// workdir's and the private /tmp's are not.
func TestReviewLearnedListsWildcards(t *testing.T) {
	for _, tc := range []struct {
		tmp        string
		want       map[string]string // object -> predicates
		hostTmp    string
		varTmpNote bool
	}{
		{tmp: "private", want: map[string]string{
			"FILE:/srv/cfg/*":             "PROVIDES RENAMES",
			"FILE:/home/dev/.npm/_logs/*": "PROVIDES MUTATES DELETES",
		}, varTmpNote: true},
		{tmp: "host", want: map[string]string{
			"FILE:/srv/cfg/*":             "PROVIDES RENAMES",
			"FILE:/home/dev/.npm/_logs/*": "PROVIDES MUTATES DELETES",
			"FILE:/tmp/**":                "PROVIDES MUTATES DELETES",
			"FILE:/var/tmp/*":             "PROVIDES MUTATES DELETES",
		}, hostTmp: "FILE:/tmp/**"},
	} {
		t.Run(tc.tmp, func(t *testing.T) {
			out := learnFrom(t, manifestTmp(t, tc.tmp, "CONSUMES FILE:/srv/repo/**"), nil, reviewRun()...)
			r, err := ReviewLearned(out)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, w := range r.Wildcards {
				got[w.Object] = strings.Join(w.Predicates, " ")
				if w.HostTmp != (w.Object == tc.hostTmp || w.Object == "FILE:/var/tmp/*") {
					t.Errorf("%s: HostTmp %v", w.Object, w.HostTmp)
				}
			}
			for obj, preds := range tc.want {
				if got[obj] != preds {
					t.Errorf("review of %s: %q, want %q", obj, got[obj], preds)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("review lists %v, want %v", got, tc.want)
			}
			if r.PrivateVarTmp != tc.varTmpNote {
				t.Errorf("PrivateVarTmp %v, want %v", r.PrivateVarTmp, tc.varTmpNote)
			}
			// In the file: one comment above each listed intent.
			lines := strings.Split(string(out), "\n")
			n := 0
			for i, l := range lines {
				if !strings.Contains(l, reviewPrefix) {
					continue
				}
				n++
				if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "- ") {
					t.Errorf("review comment not above an intent: %q", l)
				}
			}
			want := 0
			for _, p := range tc.want {
				want += len(strings.Fields(p))
			}
			if n != want {
				t.Errorf("%d review comments, want %d\n%s", n, want, out)
			}
			// Merged with itself, still one each.
			merged, err := MergeLearned(out, out)
			if err != nil {
				t.Fatal(err)
			}
			if m := strings.Count(string(merged), reviewPrefix); m != want {
				t.Errorf("merged: %d review comments, want %d\n%s", m, want, merged)
			}
		})
	}
}
