package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
)

// evil is a path an agent can create: markup in every context html/template
// knows (text, attribute, URL, script).
const evil = `/srv/repo/<script>alert(1)</script>"><img src=x onerror=alert(2)>' onmouseover='alert(3)`

// sampleLog is a strict session that read what it declared, wrote its
// output, then changed a file it only declared CONSUMES on: detected, killed
// and rolled back.
func sampleLog() *vlog.Log {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	l := &vlog.Log{
		Schema: vlog.Schema, Session: "20261128T100000-abc123", Agent: "refund-agent",
		Manifest: vlog.ManifestRef{Path: "/srv/repo/agent.yaml", SHA256: strings.Repeat("ab", 32)},
		Mode:     "strict", Start: t0, End: at(900),
		Backends: []vlog.Backend{{Name: "landlock", Guarantee: vlog.GuaranteeBlocks, Details: []string{"Landlock ABI 6"}},
			{Name: "tracepoints", Guarantee: vlog.GuaranteeDetects}},
		Leases: []vlog.HeldLease{{ID: "l-1", Lease: "MUTATES FILE:/srv/repo/out/**", Acquired: at(5)},
			{ID: "l-2", Lease: "CONSUMES FILE:/usr/**", Baseline: true, Acquired: at(5)}},
		Network: &vlog.Network{Peers: []vlog.PeerCounters{{Peer: "api.example.com:443/tcp", Via: "packet wall", OutBytes: 2048, InBytes: 81920, OutPackets: 12, InPackets: 60}},
			OutBytes: 2048, InBytes: 81920, MaxEgressBytes: 1 << 20},
		Intents: []vlog.IntentUse{
			{Intent: "CONSUMES FILE:/srv/repo/src/**", Origin: "manifest", Uses: 312},
			{Intent: "MUTATES FILE:/srv/repo/out/**", Origin: "manifest", Uses: 4},
			{Intent: "DELETES FILE:/srv/repo/tmp/**", Origin: "manifest", Uses: 0},
		},
		Baseline: []vlog.IntentUse{{Intent: "CONSUMES FILE:/usr/**", Origin: "baseline:system-ro", Uses: 900}},
		Unused:   []string{"DELETES FILE:/srv/repo/tmp/**"},
		Observed: []vlog.Observed{
			{Triple: "CONSUMES FILE:/srv/repo/src/main.go", Count: 3, First: at(40), PID: 7, Comm: "agent", AllowedBy: "CONSUMES FILE:/srv/repo/src/**"},
			{Triple: "MUTATES FILE:/srv/repo/out/a.txt", Count: 4, First: at(300), PID: 7, Comm: "agent", AllowedBy: "MUTATES FILE:/srv/repo/out/**"},
			{Triple: "MUTATES FILE:" + evil, Count: 1, First: at(610), PID: 7, Comm: "<b>agent</b>", Violation: true},
		},
		Violations: []vlog.Violation{{
			Time: at(610), Triple: "MUTATES FILE:" + evil, Path: evil,
			Error:  "ScopeViolationError: Agent attempted MUTATES on " + evil + " but only declared CONSUMES",
			Needed: "MUTATES FILE:" + evil, Declared: "CONSUMES", Action: "violation-kill", PID: 7, Comm: "<b>agent</b>",
		}},
		Rollback: []vlog.RollbackOp{
			{Path: "/srv/repo/out/a.txt", Action: vlog.RollbackRestored, OK: true},
			{Path: evil, Action: vlog.RollbackRestored, OK: true},
			{Path: "/srv/repo/out/new.txt", Action: vlog.RollbackRemoved, OK: true},
		},
		Events: 1234,
		Exit:   vlog.Exit{Signal: "SIGKILL", KilledByKlock: true, Reason: "scope violation", KilledAt: at(612)},
	}
	l.Verdict, l.Summary = l.Headline()
	return l
}

func render(t *testing.T, l *vlog.Log, opts Options) (string, *html.Node) {
	t.Helper()
	var b bytes.Buffer
	if err := HTML(&b, l, opts); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	return b.String(), doc
}

// TestAgentStringsStayText: the violation's path, process name and message
// are the agent's; whatever markup they hold comes out as text: no script
// element, no event handler attribute, no image, and the exact string is
// readable in the page's text.
func TestAgentStringsStayText(t *testing.T) {
	src, doc := render(t, sampleLog(), Options{})
	testutil.HTMLWalk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		if n.Data == "script" || n.Data == "img" {
			t.Errorf("the page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(strings.ToLower(a.Key), "on") {
				t.Errorf("<%s> has an event handler attribute %s=%q", n.Data, a.Key, a.Val)
			}
		}
	})
	if !strings.Contains(testutil.HTMLText(testutil.HTMLByID(doc, "violations")), evil) {
		t.Errorf("the violation's path is not shown as text in the violations section")
	}
	if !strings.Contains(testutil.HTMLText(testutil.HTMLByID(doc, "rollback")), evil) {
		t.Errorf("the restored path is not shown as text in the rollback section")
	}
	if strings.Contains(src, "<script>alert") || strings.Contains(src, "<img src=x") {
		t.Error("the source holds the agent's markup unescaped")
	}
}

// TestFetchesNothing: a strict CSP, and no src, href, srcset or xlink:href
// that leaves the page (only #fragments and data: are allowed).
func TestFetchesNothing(t *testing.T) {
	_, doc := render(t, sampleLog(), Options{})
	csp := ""
	testutil.HTMLWalk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		if v, _ := testutil.HTMLAttr(n, "http-equiv"); strings.EqualFold(v, "Content-Security-Policy") {
			csp, _ = testutil.HTMLAttr(n, "content")
		}
		for _, a := range n.Attr {
			switch a.Key {
			case "src", "href", "srcset", "xlink:href", "action", "poster", "data":
				if !strings.HasPrefix(a.Val, "#") && !strings.HasPrefix(a.Val, "data:") {
					t.Errorf("<%s %s=%q> points outside the page", n.Data, a.Key, a.Val)
				}
			}
		}
		if n.Data == "link" || n.Data == "iframe" || n.Data == "object" || n.Data == "embed" {
			t.Errorf("the page has a <%s> element", n.Data)
		}
	})
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "img-src data:") {
		t.Errorf("Content-Security-Policy = %q, want default-src 'none' and img-src data:", csp)
	}
}

// TestStructure: the sections a reader goes to are there, as landmarks and
// headings, with tables whose headers say what they head, and the timeline
// is an image with a title and a description that name the violation, the
// kill and the rollback.
func TestStructure(t *testing.T) {
	src, doc := render(t, sampleLog(), Options{})
	for _, css := range []string{"@media print", "prefers-color-scheme: dark"} {
		if !strings.Contains(src, css) {
			t.Errorf("the page's style has no %q", css)
		}
	}
	for _, id := range []string{"timeline", "violations", "rollback", "intents", "network", "leases", "guard", "observed", "backends"} {
		sec := testutil.HTMLByID(doc, id)
		if sec == nil || sec.Data != "section" {
			t.Errorf("no <section id=%q>", id)
			continue
		}
		if l, _ := testutil.HTMLAttr(sec, "aria-labelledby"); testutil.HTMLByID(doc, l) == nil || testutil.HTMLByID(doc, l).Data != "h2" {
			t.Errorf("section %s is not labelled by its h2", id)
		}
	}
	tags := map[string]int{}
	testutil.HTMLWalk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		tags[n.Data]++
		if n.Data == "th" {
			if _, ok := testutil.HTMLAttr(n, "scope"); !ok {
				t.Errorf("<th>%s</th> has no scope", testutil.HTMLText(n))
			}
		}
	})
	for _, tag := range []string{"header", "nav", "main", "footer", "h1", "caption", "svg"} {
		if tags[tag] == 0 {
			t.Errorf("no <%s>", tag)
		}
	}
	if tags["table"] != tags["caption"] {
		t.Errorf("%d tables, %d captions: every table needs one", tags["table"], tags["caption"])
	}
	tl := testutil.HTMLText(testutil.HTMLByID(doc, "timeline"))
	for _, want := range []string{"Violation 1 at +610ms", "klock killed the session at +612ms", "rollback: 3 files restored", "The session ran 900ms"} {
		if !strings.Contains(tl, want) {
			t.Errorf("timeline lacks %q:\n%s", want, tl)
		}
	}
	if d := testutil.HTMLText(testutil.HTMLByID(doc, "tl-desc")); !strings.Contains(d, "klock killed it at +612ms") {
		t.Errorf("the SVG's description = %q, want the kill", d)
	}
}

// TestUnderUtilization: a declared intent that allowed nothing is marked
// never used, with no bar; a used one has a bar.
func TestUnderUtilization(t *testing.T) {
	_, doc := render(t, sampleLog(), Options{})
	rows := 0
	testutil.HTMLWalk(testutil.HTMLByID(doc, "intents"), func(n *html.Node) {
		if n.Type != html.ElementNode || n.Data != "tr" || n.Parent.Data != "tbody" {
			return
		}
		rows++
		s := testutil.HTMLText(n)
		cls, _ := testutil.HTMLAttr(n, "class")
		bars := 0
		testutil.HTMLWalk(n, func(c *html.Node) {
			if v, _ := testutil.HTMLAttr(c, "class"); v == "bar" {
				bars++
			}
		})
		switch unused := strings.Contains(s, "DELETES"); {
		case unused && (cls != "unused" || !strings.Contains(s, "never used") || bars != 0):
			t.Errorf("the unused intent's row: class %q, text %q, %d bars", cls, s, bars)
		case !unused && (cls == "unused" || bars != 1):
			t.Errorf("a used intent's row: class %q, text %q, %d bars", cls, s, bars)
		}
	})
	if rows != 3 {
		t.Errorf("%d intent rows, want 3", rows)
	}
	if s := testutil.HTMLText(testutil.HTMLByID(doc, "intents")); !strings.Contains(s, "1 of 3 declared intents were never used") {
		t.Errorf("intents section: %q", s)
	}
}

// TestGuardSection: without gateway records the section says so; with
// them, each call and the spend's total are shown.
func TestGuardSection(t *testing.T) {
	_, doc := render(t, sampleLog(), Options{})
	if s := testutil.HTMLText(testutil.HTMLByID(doc, "guard")); !strings.Contains(s, "No guard calls recorded for this session") {
		t.Errorf("guard section without records: %q", s)
	}
	t0 := sampleLog().Start
	g := &Guard{Run: "20261128T100000-abc123", Sources: []string{"/var/lib/klock/gateway/refund-agent/audit.jsonl"},
		Calls: []GuardCall{{Time: t0, Tool: "refund", Verdict: "deny", Check: "must_match", Reason: "amount over the limit"}},
		Spend: []Spend{{Time: t0, Tool: "gpt", Verdict: "allow", Kind: "model", Charged: 125, Currency: "USD"},
			{Time: t0, Tool: "gpt", Verdict: "allow", Kind: "model", Charged: 17, Currency: "USD"}}}
	_, doc = render(t, sampleLog(), Options{Guard: g})
	s := testutil.HTMLText(testutil.HTMLByID(doc, "guard"))
	for _, want := range []string{"refund", "deny", "amount over the limit", "1.42 USD"} {
		if !strings.Contains(s, want) {
			t.Errorf("guard section lacks %q: %q", want, s)
		}
	}
}

// TestIncomplete: a log written at the start says it has no end, and
// renders without a timeline end or rollback.
func TestIncomplete(t *testing.T) {
	l := &vlog.Log{Schema: vlog.Schema, Session: "s", Agent: "a", Mode: "strict", Start: time.Now()}
	l.Begin(4242)
	_, doc := render(t, l, Options{})
	if s := testutil.HTMLText(testutil.HTMLByID(doc, "main")); !strings.Contains(s, "No end recorded") || !strings.Contains(s, "pid 4242") {
		t.Errorf("incomplete log: %q", s)
	}
}
