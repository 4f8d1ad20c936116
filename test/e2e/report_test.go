//go:build linux

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/harness"
)

// TestHTMLReportOfStrictKill: a real strict session writes a file it may
// and then chmods one it only reads; it is killed and rolled back. `klock
// log ID --html` makes the page an operator opens, and headless Chromium
// (Debian's chromium, scripts/deps.sh report) renders it: the DOM it
// builds, not the source, shows the violation, the restored files and the
// timeline with its kill and rollback marks. Its screenshot is left in
// bin/report.png for people to look at.
func TestHTMLReportOfStrictKill(t *testing.T) {
	w := harness.NewWorld(t)
	browser := chromium(t)
	klock := filepath.Join(harness.KlockBins(t), "klock")
	work, ro := w.W("work"), w.W("ro")
	w.File(filepath.Join(work, "notes.txt"), "v1\n")
	w.File(filepath.Join(ro, "config.txt"), "config\n")
	intents := append([]string{
		"MUTATES FILE:" + work + "/**",
		"CONSUMES FILE:" + ro + "/**",
		"DELETES FILE:" + work + "/scratch/**", // never used
		"PROVIDES PROC:" + dash(t),
	}, harness.ProbeIntents()...)
	script := `set -e
printf 'v2\n' >> "$W/work/notes.txt"
`
	target := filepath.Join(ro, "config.txt")
	o := runThenChmod(w, intents, script, target)
	assertKilledForChmod(t, o, target)
	if got := w.Content(filepath.Join(work, "notes.txt")); got != "v1\n" {
		t.Fatalf("notes.txt = %q after the rollback, want v1", got)
	}

	// The report, as an operator makes it: by session id, under the
	// manifest's workdir.
	page := filepath.Join(t.TempDir(), "report.html")
	var out, errb bytes.Buffer
	cmd := exec.Command(klock, "log", "--html", "-m", o.ManifestPath, o.Res.ID)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("klock log --html: %v\n%s", err, errb.String())
	}
	must(t, os.WriteFile(page, out.Bytes(), 0o644))
	blocked := len(o.Res.Log.Violations) > 0 && o.Res.Log.Violations[0].Blocked

	if browser == "" {
		// The page has no script: the DOM a browser builds is its source
		// parsed. The host's run renders it in Chromium.
		doc, err := html.Parse(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("the page does not parse: %v", err)
		}
		assertReportDOM(t, doc, target, filepath.Join(work, "notes.txt"), blocked)
		t.Log("no browser in the VM: the page's source was checked, the host run renders it")
		return
	}
	dom := renderedDOM(t, browser, page)
	assertReportDOM(t, dom, target, filepath.Join(work, "notes.txt"), blocked)

	shot := filepath.Join(repoRoot(t), "bin", "report.png")
	must(t, os.MkdirAll(filepath.Dir(shot), 0o755))
	os.Remove(shot)
	headless(t, browser, "--screenshot="+shot, "--window-size=1280,2000", "file://"+page)
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}

// chromium is Debian's chromium, or the test is unavailable; "" in the
// VM (KLOCK_IN_VM, a busybox root with no browser), where the session is
// what the kernel decides and the page is checked from its source.
func chromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil && os.Getenv("KLOCK_IN_VM") == "1" {
		return ""
	}
	if err != nil {
		testutil.Unavailable(t, "no chromium (scripts/deps.sh report installs it)")
	}
	return p
}

// headless runs chromium with nothing it could reach out for: no network
// services of its own, a fresh profile, and returns its stdout.
func headless(t *testing.T, browser string, args ...string) string {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd := exec.Command(browser, append(base, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

func renderedDOM(t *testing.T, browser, page string) *html.Node {
	t.Helper()
	src := headless(t, browser, "--dump-dom", "file://"+page)
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("chromium's DOM does not parse: %v", err)
	}
	return doc
}

// assertReportDOM checks what the browser built: the violation with the
// chmodded file, the restored files (the chmodded one too unless a wall
// refused it before its effect), and the timeline's SVG with the
// violation's mark, the kill and the rollback.
func assertReportDOM(t *testing.T, doc *html.Node, target, written string, blocked bool) {
	t.Helper()
	violations := testutil.HTMLText(elementByID(t, doc, "violations"))
	for _, want := range []string{"MUTATES FILE:" + target, "ScopeViolationError", "would have been allowed by"} {
		if !strings.Contains(strings.ToLower(violations), strings.ToLower(want)) {
			t.Errorf("rendered violations section lacks %q:\n%s", want, violations)
		}
	}
	restored := testutil.HTMLText(elementByID(t, doc, "rollback"))
	wants := []string{written, "restored"}
	if !blocked {
		// Detected after the effect (Landlock with tracepoints): the
		// chmod happened and is put back too. bpf-lsm refused it before.
		wants = append(wants, target)
	}
	for _, want := range wants {
		if !strings.Contains(restored, want) {
			t.Errorf("rendered rollback section lacks %q:\n%s", want, restored)
		}
	}
	tl := elementByID(t, doc, "timeline")
	var svg *html.Node
	classes := map[string]int{}
	testutil.HTMLWalk(tl, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		if n.Data == "svg" && svg == nil {
			svg = n
		}
		for _, a := range n.Attr {
			if a.Key == "class" {
				classes[a.Val]++
			}
		}
	})
	if svg == nil {
		t.Fatalf("the rendered timeline has no <svg>")
	}
	for _, c := range []string{"violation", "kill", "rollback"} {
		if classes[c] == 0 {
			t.Errorf("the timeline's SVG has no %q mark", c)
		}
	}
	if s := testutil.HTMLText(svg); !strings.Contains(s, "klock killed the session") || !strings.Contains(s, "Violation 1") {
		t.Errorf("the SVG's titles do not name the violation and the kill: %q", s)
	}
	if s := testutil.HTMLText(elementByID(t, doc, "intents")); !strings.Contains(s, "never used") {
		t.Errorf("the unused DELETES intent is not marked never used:\n%s", s)
	}
}

func elementByID(t *testing.T, doc *html.Node, id string) *html.Node {
	t.Helper()
	n := testutil.HTMLByID(doc, id)
	if n == nil {
		t.Fatalf("the rendered page has no #%s", id)
	}
	return n
}

// repoRoot is the module's root: go test runs a test in its package's
// directory, test/e2e.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}
