package logswitch

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A logger derived before a Set writes in the new format and level after
// it, with its attributes and group.
func TestSetChangesDerivedLoggers(t *testing.T) {
	var b bytes.Buffer
	sw := New(&b, Text, slog.LevelInfo)
	log := slog.New(sw.Handler()).With("session", "s1").WithGroup("g")
	log.Debug("hidden")
	log.Info("one", "k", 1)
	if got := b.String(); strings.Contains(got, "hidden") || !strings.Contains(got, "session=s1") || !strings.Contains(got, "g.k=1") {
		t.Fatalf("text: %q", got)
	}
	b.Reset()
	sw.Set(JSON, slog.LevelDebug)
	log.Debug("two", "k", 2)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("not JSON after Set: %q", b.String())
	}
	if rec["msg"] != "two" || rec["session"] != "s1" || rec["g"].(map[string]any)["k"] != float64(2) {
		t.Fatalf("json: %v", rec)
	}
}

func TestParse(t *testing.T) {
	if f, err := ParseFormat("JSON"); err != nil || f != JSON {
		t.Fatal(f, err)
	}
	if _, err := ParseFormat("xml"); !errors.Is(err, ErrFormat) {
		t.Fatal(err)
	}
	if l, err := ParseLevel("warn"); err != nil || l != slog.LevelWarn {
		t.Fatal(l, err)
	}
	if _, err := ParseLevel("loud"); !errors.Is(err, ErrLevel) {
		t.Fatal(err)
	}
}
