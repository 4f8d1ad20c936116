package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy/money"
)

// Guard is what the tool gateway recorded for the session's run: its tool
// calls (the audit log) and what they cost (the receipts). Nil or empty:
// the page says no guard call was recorded for the session.
type Guard struct {
	// Run is the gateway's run id the records were selected by.
	Run string
	// Sources name the files they came from.
	Sources []string
	Calls   []GuardCall
	Spend   []Spend
}

// GuardCall is one tool call the gateway decided.
type GuardCall struct {
	Time time.Time
	Tool string
	// Verdict is the gateway's (allow, deny, escalate, approved, replay,
	// or rollback for a compensating call run after a kill).
	Verdict string
	// Result is the call's outcome class (ok, tool_error, ...); empty when
	// the call was refused or its result was never recorded.
	Result     string
	Check      string
	Reason     string
	DurationMS float64
}

// Spend is one cost decision (a receipt): what was charged, in minor
// units of Currency.
type Spend struct {
	Time     time.Time
	Tool     string
	Verdict  string
	Kind     string // model | tool
	Charged  uint64
	Currency string
}

// Options shape the page.
type Options struct {
	Guard *Guard
	// MaxObserved bounds the observed operations listed (violations
	// always shown); 0 means 40, negative means all.
	MaxObserved int
	// Generator names what made the page ("klock v1.2.3"), in its footer.
	Generator string
}

//go:embed page.html.tmpl
var pageSrc string

//go:embed style.css
var styleSrc string

// pageTmpl is parsed at the first report, not at every start of the
// binaries that link this package (a third of a millisecond).
var pageTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"clock": clock, "bytes": humanBytes, "count": func(n uint64) string { return fmt.Sprintf("%d", n) },
	}).Parse(pageSrc))
})

// HTML writes the report of l as one self-contained HTML page.
func HTML(w io.Writer, l *vlog.Log, opts Options) error {
	p := build(l, opts)
	if err := pageTmpl().Execute(w, p); err != nil {
		return fmt.Errorf("session report: %w", err)
	}
	return nil
}

// page is what the template renders: the log, and what is derived from
// it once here rather than in template logic.
type page struct {
	L                *vlog.Log
	Verdict, Summary string
	Cause            string
	Tone             string // ok | bad | warn: the verdict's colour
	Span, Exit       string
	SHA              string
	Timeline         timeline
	Violations       []violationRow
	Rollback         rollbackView
	Intents          intentsView
	Network          *networkView
	Leases           leasesView
	Guard            guardView
	Observed         observedView
	CSS              template.CSS
	Generator        string
}

func build(l *vlog.Log, opts Options) *page {
	verdict, summary := l.Headline()
	p := &page{
		L: l, Verdict: verdict, Summary: summary, Tone: tone(verdict),
		Span: span(l.Start, l.End), Exit: exitText(l), SHA: l.Manifest.SHA256,
		CSS: template.CSS(styleSrc), Generator: opts.Generator,
	}
	if verdict == vlog.VerdictViolation || verdict == vlog.VerdictKilled {
		switch {
		case len(l.Violations) > 0:
			p.Cause = l.Violations[0].Error
		case l.Exit.Reason != "":
			p.Cause = l.Exit.Reason
		}
	}
	p.Violations = violationRows(l)
	p.Rollback = rollbackOf(l.Rollback)
	p.Timeline = buildTimeline(l, p.Rollback)
	p.Intents = intentsOf(l)
	p.Network = networkOf(l.Network)
	p.Leases = leasesOf(l)
	p.Guard = guardOf(opts.Guard)
	p.Observed = observedOf(l, opts.MaxObserved)
	return p
}

func tone(verdict string) string {
	switch verdict {
	case vlog.VerdictClean:
		return "ok"
	case vlog.VerdictAmended, vlog.VerdictIncomplete:
		return "warn"
	}
	return "bad"
}

// violationRow is one violation, numbered as its mark on the timeline.
type violationRow struct {
	N int
	vlog.Violation
	Outcome string
}

func violationRows(l *vlog.Log) []violationRow {
	rows := make([]violationRow, 0, len(l.Violations))
	for i, v := range l.Violations {
		out := "detected after the effect"
		switch {
		case v.ByDNSProxy():
			out = "refused by the session's DNS proxy"
		case v.Blocked:
			out = "blocked by the kernel"
		case v.Failed():
			out = "failed in the kernel (" + vlog.ErrnoName(v.Errno) + "): no effect"
		}
		rows = append(rows, violationRow{N: i + 1, Violation: v, Outcome: out + " → " + v.Action})
	}
	return rows
}

type rollbackView struct {
	Ops              []vlog.RollbackOp
	Restored, Failed int
}

func rollbackOf(ops []vlog.RollbackOp) rollbackView {
	v := rollbackView{Ops: ops}
	for _, r := range ops {
		switch {
		case r.Action == vlog.RollbackSpared || r.Action == vlog.RollbackLeft && r.OK:
		case r.OK:
			v.Restored++
		default:
			v.Failed++
		}
	}
	return v
}

// intentRow is a declared intent with its bar: the length is the log of
// its uses against the most used one's, so one use still shows beside
// thousands, and never used shows as no bar at all.
type intentRow struct {
	vlog.IntentUse
	Pct int
}

type intentsView struct {
	Rows                          []intentRow
	Unused                        int
	BaselineUses                  uint64
	BaselineUsed, BaselineIntents int
}

func intentsOf(l *vlog.Log) intentsView {
	var v intentsView
	var top uint64
	for _, in := range l.Intents {
		top = max(top, in.Uses)
	}
	for _, in := range l.Intents {
		pct := 0
		if in.Uses > 0 {
			pct = max(2, int(math.Round(100*math.Log1p(float64(in.Uses))/math.Log1p(float64(top)))))
		}
		if in.Uses == 0 && in.Origin == "manifest" {
			v.Unused++
		}
		v.Rows = append(v.Rows, intentRow{IntentUse: in, Pct: pct})
	}
	for _, b := range l.Baseline {
		v.BaselineUses += b.Uses
		if b.Uses > 0 {
			v.BaselineUsed++
		}
	}
	v.BaselineIntents = len(l.Baseline)
	return v
}

type networkView struct {
	*vlog.Network
	Budget string
}

func networkOf(n *vlog.Network) *networkView {
	if n == nil {
		return nil
	}
	v := &networkView{Network: n}
	if n.MaxEgressBytes > 0 {
		v.Budget = humanBytes(n.MaxEgressBytes)
		if n.Exceeded {
			v.Budget += ": exceeded"
		}
	}
	return v
}

type leasesView struct {
	Manifest []vlog.HeldLease
	Baseline int
	Wait     *vlog.LeaseWait
	Waited   string
}

func leasesOf(l *vlog.Log) leasesView {
	var v leasesView
	for _, h := range l.Leases {
		if h.Baseline {
			v.Baseline++
			continue
		}
		v.Manifest = append(v.Manifest, h)
	}
	if w := l.LeaseWait; w != nil {
		v.Wait, v.Waited = w, w.Waited().Round(time.Millisecond).String()
	}
	return v
}

type guardView struct {
	*Guard
	Totals []string // spend per currency, "0.42 USD"
}

func guardOf(g *Guard) guardView {
	v := guardView{Guard: g}
	if g == nil {
		return v
	}
	sums := map[string]uint64{}
	for _, s := range g.Spend {
		sums[s.Currency] += s.Charged
	}
	for cur, units := range sums {
		v.Totals = append(v.Totals, amount(units, cur))
	}
	sort.Strings(v.Totals)
	return v
}

// amount is units of cur as "12.34 USD", or "1234 units of XYZ" for a
// currency the money package does not know.
func amount(units uint64, cur string) string {
	if a, err := money.New(units, cur); err == nil {
		return a.String()
	}
	return fmt.Sprintf("%d minor units of %s", units, cur)
}

// Amount is a spend's charge as text, for the template.
func (s Spend) Amount() string { return amount(s.Charged, s.Currency) }

type observedView struct {
	Rows  []vlog.Observed
	Total int
	More  int
}

// observedOf lists violations first, then the manifest's operations by
// count, then the baseline's: the most frequent and the least telling.
func observedOf(l *vlog.Log, limit int) observedView {
	if limit == 0 {
		limit = 40
	}
	obs := append([]vlog.Observed(nil), l.Observed...)
	sort.SliceStable(obs, func(a, b int) bool {
		x, y := &obs[a], &obs[b]
		if x.Violation != y.Violation {
			return x.Violation
		}
		if x.Baseline != y.Baseline {
			return y.Baseline
		}
		return x.Count > y.Count
	})
	v := observedView{Total: len(obs)}
	for _, o := range obs {
		if limit > 0 && len(v.Rows) >= limit && !o.Violation {
			break
		}
		v.Rows = append(v.Rows, o)
	}
	v.More = len(obs) - len(v.Rows)
	return v
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("15:04:05.000")
}

func span(a, b time.Time) string {
	if a.IsZero() {
		return "unknown"
	}
	s := a.UTC().Format("2006-01-02 15:04:05.000 UTC")
	if b.IsZero() {
		return s + " → no end recorded"
	}
	return fmt.Sprintf("%s → %s (%s)", s, b.UTC().Format("15:04:05.000"), b.Sub(a).Round(time.Millisecond))
}

func exitText(l *vlog.Log) string {
	if l.Incomplete() {
		return "not recorded"
	}
	s := l.Exit.Text()
	if l.Exit.KilledByKlock && len(l.Violations) == 0 && l.Exit.Reason != "" {
		s += ": " + l.Exit.Reason // no violation says why
	}
	return s
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// short cuts s to n runes with an ellipsis: the timeline's labels; the
// whole string is in the mark's title and the tables.
func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
