package report

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// The timeline's geometry, in the SVG's viewBox units: lane labels on
// the left, the plot from plotX0 to plotX1, one lane per kind of mark.
const (
	svgW       = 1000
	plotX0     = 150.0
	plotX1     = 975.0
	actTop     = 30.0 // the activity histogram, actTop to actBottom
	actBottom  = 96.0
	violY      = 128.0
	leaseY     = 166.0
	klockY     = 204.0
	axisY      = 232.0
	svgH       = 262
	activeBins = 100
	// maxMarks bounds the numbered violation marks drawn (all are in
	// the table).
	maxMarks = 60
)

// timeline is the inline SVG of the session over time, and the same
// moments as rows of a table.
type timeline struct {
	W, H          int
	Title, Desc   string
	Lanes         []lane
	Ticks         []tick
	Activity      []bar
	ActivityMax   int
	Violations    []mark
	Leases        []mark
	Kill          *mark
	Rollback      *band
	StartX, EndX  string
	Moments       []moment
	AxisY, PlotX0 string
	PlotX1        string
}

type lane struct {
	Y     string
	Label string
}

type tick struct{ X, Label, Anchor string }

type bar struct{ X, Y, W, H, Title string }

// mark is one point in time: X, Y its place, Label drawn beside it
// (Anchor start or end, so labels near the right edge stay inside),
// Title its whole description (the tooltip, and what a screen reader
// reads).
type mark struct {
	X, Y, LX, LY  string
	Anchor, Label string
	Title, Num    string
}

type band struct {
	X, Y, W, H    string
	LX, LY        string
	Anchor, Label string
	Title         string
}

// moment is one row of the timeline's table.
type moment struct {
	Clock, Rel, What string
	Kind             string // violation | kill | rollback | lease | session
}

// scale maps the session's times into the plot.
type scale struct {
	t0   time.Time
	span time.Duration
}

func (s scale) x(t time.Time) float64 {
	f := float64(t.Sub(s.t0)) / float64(s.span)
	return plotX0 + (plotX1-plotX0)*math.Max(0, math.Min(1, f))
}

func (s scale) rel(t time.Time) string { return "+" + dur(t.Sub(s.t0)) }

func num(f float64) string { return fmt.Sprintf("%.1f", f) }

// buildTimeline lays the log's times out: what the agent did first (the
// activity), its violations, the leases and amendments, klock's kill and
// the rollback. The rollback has no time of its own in the log: it ran
// between the kill and the session's end, and is drawn as that span.
func buildTimeline(l *vlog.Log, rb rollbackView) timeline {
	sc := scaleOf(l)
	tl := timeline{W: svgW, H: svgH, AxisY: num(axisY), PlotX0: num(plotX0), PlotX1: num(plotX1),
		StartX: num(plotX0), EndX: num(sc.x(sc.t0.Add(sc.span)))}
	tl.Lanes = []lane{
		{num((actTop + actBottom) / 2), "operations"},
		{num(violY), "violations"},
		{num(leaseY), "leases"},
		{num(klockY), "klock"},
	}
	tl.Ticks = ticksOf(sc)
	tl.Activity, tl.ActivityMax = activityOf(l, sc)
	tl.Violations = violationMarks(l, sc)
	tl.Leases = leaseMarks(l, sc)
	tl.Kill, tl.Rollback = killAndRollback(l, sc, rb)
	tl.Moments = momentsOf(l, sc, rb)
	tl.Title = "Timeline of session " + l.Session
	tl.Desc = describe(l, sc, rb)
	return tl
}

func scaleOf(l *vlog.Log) scale {
	t0, t1 := l.Start, l.End
	for _, t := range times(l) {
		if t0.IsZero() || t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Millisecond
	}
	return scale{t0: t0, span: span}
}

// times are every non-zero time the log records.
func times(l *vlog.Log) []time.Time {
	var ts []time.Time
	add := func(t time.Time) {
		if !t.IsZero() {
			ts = append(ts, t)
		}
	}
	for _, v := range l.Violations {
		add(v.Time)
	}
	for _, o := range l.Observed {
		add(o.First)
	}
	for _, h := range l.Leases {
		add(h.Acquired)
	}
	for _, a := range l.Amendments {
		add(a.Time)
	}
	add(l.Exit.KilledAt)
	return ts
}

// ticksOf puts six labelled ticks on the axis, relative to the start.
func ticksOf(sc scale) []tick {
	var ts []tick
	for i := range 6 {
		t := sc.t0.Add(sc.span * time.Duration(i) / 5)
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 5:
			anchor = "end"
		}
		ts = append(ts, tick{X: num(sc.x(t)), Label: sc.rel(t), Anchor: anchor})
	}
	return ts
}

// activityOf is a histogram of the distinct operations the session first
// made in each slice of its time: when the agent was busy.
func activityOf(l *vlog.Log, sc scale) ([]bar, int) {
	var bins [activeBins]int
	for _, o := range l.Observed {
		if o.First.IsZero() {
			continue
		}
		i := int(float64(activeBins) * float64(o.First.Sub(sc.t0)) / float64(sc.span))
		bins[min(max(i, 0), activeBins-1)]++
	}
	top := 0
	for _, n := range bins {
		top = max(top, n)
	}
	var bars []bar
	w := (plotX1 - plotX0) / activeBins
	for i, n := range bins {
		if n == 0 {
			continue
		}
		h := math.Max(2, (actBottom-actTop)*math.Sqrt(float64(n)/float64(top)))
		from := sc.t0.Add(sc.span * time.Duration(i) / activeBins)
		bars = append(bars, bar{X: num(plotX0 + w*float64(i)), Y: num(actBottom - h), W: num(math.Max(1, w-1)), H: num(h),
			Title: fmt.Sprintf("%s: %d new operations", sc.rel(from), n)})
	}
	return bars, top
}

// label places a mark's label beside it, on the side with room.
func label(m *mark, x, y float64) {
	m.LX, m.LY, m.Anchor = num(x+10), num(y+4), "start"
	if x > (plotX0+plotX1)/2 {
		m.LX, m.Anchor = num(x-10), "end"
	}
}

func violationMarks(l *vlog.Log, sc scale) []mark {
	var ms []mark
	for i, v := range l.Violations {
		if i == maxMarks || v.Time.IsZero() {
			continue
		}
		x := sc.x(v.Time)
		m := mark{X: num(x), Y: num(violY), Num: fmt.Sprint(i + 1),
			Title: fmt.Sprintf("Violation %d at %s: %s", i+1, sc.rel(v.Time), v.Error)}
		if i == 0 {
			m.Label = short(v.Triple, 60)
			label(&m, x, violY)
		}
		ms = append(ms, m)
	}
	return ms
}

func leaseMarks(l *vlog.Log, sc scale) []mark {
	var ms []mark
	seen := map[string]bool{}
	for _, h := range l.Leases {
		if h.Acquired.IsZero() || seen[num(sc.x(h.Acquired))] {
			continue // leases taken together: one mark
		}
		seen[num(sc.x(h.Acquired))] = true
		ms = append(ms, mark{X: num(sc.x(h.Acquired)), Y: num(leaseY), Title: "Leases acquired at " + sc.rel(h.Acquired)})
	}
	for _, a := range l.Amendments {
		ms = append(ms, mark{X: num(sc.x(a.Time)), Y: num(leaseY), Num: "+", Title: "Amendment at " + sc.rel(a.Time) + ": " + a.Intent})
	}
	return ms
}

// killAndRollback marks klock's kill (a line across the lanes) and the
// rollback after it, up to the session's end.
func killAndRollback(l *vlog.Log, sc scale, rb rollbackView) (*mark, *band) {
	var kill *mark
	end := sc.t0.Add(sc.span)
	killAt := l.Exit.KilledAt
	if l.Exit.KilledByKlock && killAt.IsZero() {
		killAt = end
	}
	if !killAt.IsZero() {
		x := sc.x(killAt)
		kill = &mark{X: num(x), Y: num(klockY), Label: "killed " + sc.rel(killAt),
			Title: "klock killed the session at " + sc.rel(killAt) + ": " + l.Exit.Reason}
		label(kill, x, actTop-12)
	}
	if len(rb.Ops) == 0 {
		return kill, nil
	}
	from := end
	if !killAt.IsZero() {
		from = killAt
	}
	x0, x1 := sc.x(from), sc.x(end)
	if x1-x0 < 8 {
		x0 = x1 - 8
	}
	what := rollbackText(rb)
	b := &band{X: num(x0), Y: num(klockY - 9), W: num(x1 - x0), H: "18", Label: "rollback: " + what,
		Title: "Rollback between " + sc.rel(from) + " and the end at " + sc.rel(end) + ": " + what}
	b.LX, b.LY, b.Anchor = num(x0-8), num(klockY+4), "end"
	if x0 < (plotX0+plotX1)/2 {
		b.LX, b.Anchor = num(x1+8), "start"
	}
	return kill, b
}

func rollbackText(rb rollbackView) string {
	s := plural(rb.Restored, "file") + " restored"
	if rb.Failed > 0 {
		s += fmt.Sprintf(", %d FAILED", rb.Failed)
	}
	return s
}

// momentsOf is the timeline as rows: the session's start and end, when it
// took its leases, each violation and amendment, the kill and the rollback.
func momentsOf(l *vlog.Log, sc scale, rb rollbackView) []moment {
	type at struct {
		t time.Time
		m moment
	}
	var xs []at
	add := func(t time.Time, kind, what string) {
		if !t.IsZero() {
			xs = append(xs, at{t, moment{Clock: clock(t), Rel: sc.rel(t), What: what, Kind: kind}})
		}
	}
	add(l.Start, "session", "session started ("+string(l.Mode)+" mode)")
	if len(l.Leases) > 0 {
		add(l.Leases[0].Acquired, "lease", leasesText(l.Leases)+" acquired")
	}
	for i, v := range l.Violations {
		add(v.Time, "violation", fmt.Sprintf("violation %d: %s (pid %d %s)", i+1, v.Triple, v.PID, v.Comm))
	}
	for _, a := range l.Amendments {
		add(a.Time, "lease", "amended: "+a.Intent)
	}
	if l.Exit.KilledByKlock {
		add(l.Exit.KilledAt, "kill", killText(l))
	}
	sort.SliceStable(xs, func(a, b int) bool { return xs[a].t.Before(xs[b].t) })
	if len(rb.Ops) > 0 {
		xs = append(xs, at{m: moment{Clock: "—", Rel: "before the end", What: "rollback: " + rollbackText(rb), Kind: "rollback"}})
	}
	add(l.End, "session", "session ended: "+l.Exit.Text())
	ms := make([]moment, len(xs))
	for i, x := range xs {
		ms[i] = x.m
	}
	return ms
}

// describe is the timeline's text for a screen reader: what the picture
// shows, in a few sentences.
func describe(l *vlog.Log, sc scale, rb rollbackView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The session ran %s with %s first seen.", dur(sc.span), plural(len(l.Observed), "distinct operation"))
	if n := len(l.Violations); n > 0 && !l.Violations[0].Time.IsZero() {
		fmt.Fprintf(&b, " %s, the first at %s: %s.", plural(n, "violation"), sc.rel(l.Violations[0].Time), l.Violations[0].Triple)
	}
	if !l.Exit.KilledAt.IsZero() {
		fmt.Fprintf(&b, " klock killed it at %s.", sc.rel(l.Exit.KilledAt))
	}
	if len(rb.Ops) > 0 {
		fmt.Fprintf(&b, " The rollback then ran to the end: %s.", rollbackText(rb))
	}
	return b.String()
}

// dur prints a duration with three significant figures at most.
func dur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// leasesText counts the leases, the baseline's apart.
func leasesText(hs []vlog.HeldLease) string {
	n := 0
	for _, h := range hs {
		if h.Baseline {
			n++
		}
	}
	if n == 0 {
		return plural(len(hs), "lease")
	}
	return fmt.Sprintf("%s (%d for the baseline)", plural(len(hs), "lease"), n)
}

// killText says when klock killed the session against the first
// violation (how long the agent ran on), or why when no violation did.
func killText(l *vlog.Log) string {
	if len(l.Violations) == 0 || l.Violations[0].Time.IsZero() || l.Exit.KilledAt.IsZero() {
		return "klock killed the session: " + l.Exit.Reason
	}
	return fmt.Sprintf("klock killed the session, %s after violation 1", dur(max(0, l.Exit.KilledAt.Sub(l.Violations[0].Time))))
}
