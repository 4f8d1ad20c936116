//go:build linux

package session

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// TestNoticesReachTheirHolderOnce: what one session's rollback posts for
// another is read by that session whole, oldest first, once; an id that
// could name another directory is refused, and a notice that does not
// parse is reported, never dropped.
func TestNoticesReachTheirHolderOnce(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := postNotices(dir, "holder-1", "b-2", []vlog.Intrusion{{Time: t0.Add(time.Second), Session: "b-2", Path: "/w/a/x", PutBack: "restored", OK: true}}); err != nil {
		t.Fatal(err)
	}
	if err := postNotices(dir, "holder-1", "c-3", []vlog.Intrusion{{Time: t0, Session: "c-3", Path: "/w/a/y", PutBack: "moved back", OK: true}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../etc", "a/b", "", "."} {
		if err := postNotices(dir, bad, "b-2", []vlog.Intrusion{{Path: "/x"}}); err == nil {
			t.Errorf("postNotices for holder %q: no error", bad)
		}
	}
	got := takeNotices(dir, "holder-1")
	if len(got) != 2 || got[0].Session != "c-3" || got[1].Session != "b-2" || got[1].Path != "/w/a/x" {
		t.Fatalf("notices %+v", got)
	}
	if again := takeNotices(dir, "holder-1"); len(again) != 0 {
		t.Fatalf("read twice: %+v", again)
	}
	if err := os.MkdirAll(filepath.Join(dir, "holder-2"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "holder-2", "x-1.json"), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := takeNotices(dir, "holder-2"); len(got) != 1 || got[0].OK || got[0].Error == "" {
		t.Fatalf("a torn notice: %+v, want it reported", got)
	}
}

// TestIsSessionName: the loop accepts what the pattern
// ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ accepts, and nothing else: ids
// that could name another directory ("..", "a/b", "") are refused.
func TestIsSessionName(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	cases := []string{"", ".", "..", "a", "A9", "20261130T062827-e59365", "-a", "_a", ".a", "a/b", "a b", "a\x00", "é",
		"a..b", "a-", strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat(".", 127)}
	for c := 0; c < 256; c++ {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)}))
	}
	for _, s := range cases {
		if got, want := isSessionName(s), re.MatchString(s); got != want {
			t.Errorf("isSessionName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
