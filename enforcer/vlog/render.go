package vlog

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// RenderOptions shape the human summary.
type RenderOptions struct {
	// JSON writes the verification.json document instead (klock log --json).
	JSON bool
	// MaxObserved bounds the observed triples listed (most frequent first,
	// violations always shown); 0 means 15, negative means all.
	MaxObserved int
	// Verbose lists every baseline intent instead of a one-line total.
	Verbose bool
}

// Render writes the human summary of a log (or its JSON).
//
// The sections come in the order klock log documents: the verdict, the
// session's identity, then what enforced it and what happened under it.
func Render(w io.Writer, l *Log, opts RenderOptions) error {
	if opts.JSON {
		return l.encodeTo(w)
	}
	l = printableLog(l)
	r := &renderer{w: w}
	r.verdict(l)
	r.identity(l)
	if l.Incomplete() {
		// Written when the session started: nothing more is in it.
		return r.err
	}
	r.backends(l.Backends, opts.Verbose)
	r.canaries(l.Canaries)
	r.leases(l, opts.Verbose)
	r.network(l.Network)
	r.violations(l.Violations)
	r.refused(l.Refused)
	r.rollback(l.Rollback)
	r.intrusions(l.Intrusions)
	r.amendments(l.Amendments, l.Violations)
	r.intents(l.Intents)
	r.baseline(l.Baseline, opts.Verbose)
	r.unused(l.Unused)
	maxObserved := opts.MaxObserved
	if opts.Verbose {
		maxObserved = -1
	}
	r.observed(l, maxObserved)
	r.lost(l.Lost)
	return r.err
}

// verdict prints the headline and, for a violation or a kill, its first
// cause: the line a reader needs before any detail.
func (r *renderer) verdict(l *Log) {
	verdict, summary := l.Headline()
	r.line("%s", summary)
	if verdict == VerdictViolation || verdict == VerdictKilled {
		switch {
		case len(l.Violations) > 0:
			r.line("  %s", l.Violations[0].Error)
		case l.Exit.Reason != "":
			r.line("  %s", l.Exit.Reason)
		}
	}
	r.line("")
}

// identity prints the session's table (session, time, manifest, exit,
// events, container): all a log written at the start already holds.
func (r *renderer) identity(l *Log) {
	tw := tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "session\t%s (agent %s, %s mode)\n", l.Session, l.Agent, l.Mode)
	fmt.Fprintf(tw, "time\t%s\n", span(l.Start, l.End))
	sum := l.Manifest.SHA256
	if len(sum) > 16 {
		sum = sum[:16] + "…"
	}
	fmt.Fprintf(tw, "manifest\t%s (sha256 %s)\n", l.Manifest.Path, sum)
	if l.Incomplete() {
		fmt.Fprintf(tw, "exit\tnot recorded\n")
	} else {
		fmt.Fprintf(tw, "exit\t%s%s\n", l.Exit.Text(), killLatency(l))
	}
	rec := ""
	if l.Recording != "" {
		rec = ", recording " + l.Recording
	}
	fmt.Fprintf(tw, "events\t%d kernel events, %d distinct triples, %d lost%s\n", l.Events, len(l.Observed), l.Lost.Total, rec)
	if c := l.Container; c != nil {
		// Its paths above and below are the container's; the rollback's
		// the host's.
		fmt.Fprintf(tw, "container\t%s (%s mode), bundle %s\n", c.ID, c.Mode, c.Bundle)
		for _, m := range c.Mounts {
			if m.Host != "" {
				fmt.Fprintf(tw, "  mount\t%s → host %s\n", m.Container, m.Host)
			}
		}
	}
	tw.Flush()
	r.err = firstErr(r.err, tw.Flush())
}

// backends prints each enforcement backend's guarantee and first detail;
// the further details (Landlock residuals, ...) one per line, on request.
// canaries prints what the walls did with their canaries; nothing for a
// log without any (older logs, containers).
func (r *renderer) canaries(cs []Canary) {
	if len(cs) == 0 {
		return
	}
	r.section("Canaries (tried before the agent ran, each must be refused)", len(cs))
	for _, c := range cs {
		fmt.Fprintf(r.w, "  %s\n", c)
	}
}

func (r *renderer) backends(bs []Backend, verbose bool) {
	r.section("Backends", len(bs))
	tw := tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
	for _, b := range bs {
		if len(b.Details) == 0 {
			fmt.Fprintf(tw, "  %s\t%s\n", b.Name, b.Guarantee)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", b.Name, b.Guarantee, b.Details[0])
	}
	r.err = firstErr(r.err, tw.Flush())
	for _, b := range bs {
		if len(b.Details) < 2 {
			continue
		}
		if !verbose {
			fmt.Fprintf(r.w, "  (%s: %d more details: klock log -v)\n", b.Name, len(b.Details)-1)
			continue
		}
		fmt.Fprintf(r.w, "  %s:\n", b.Name)
		for _, d := range b.Details[1:] {
			fmt.Fprintf(r.w, "    - %s\n", d)
		}
	}
}

// violations prints each violation: who made the call, what the kernel
// did with it, and the intent that would have allowed it.
func (r *renderer) violations(vs []Violation) {
	if len(vs) == 0 {
		return
	}
	r.section("Violations", len(vs))
	for _, v := range vs {
		how := "detected"
		switch {
		case v.ByDNSProxy():
			// No process made this call: the proxy refused a name or
			// withheld an answer; what it was asked is its syscall.
			r.line("  %s  %s  refused by the session's DNS proxy → %s", clock(v.Time), v.Triple, v.Action)
			r.line("      %s", v.Syscall)
			how = ""
		case v.Blocked:
			how = "blocked by the kernel"
		case v.Failed():
			how = "failed in the kernel (" + ErrnoName(v.Errno) + "): no effect"
		}
		if how != "" {
			r.line("  %s  %s  pid %d %s  %s → %s", clock(v.Time), v.Triple, v.PID, v.Comm, how, v.Action)
		}
		r.line("      %s", v.Error)
		r.line("      would have been allowed by: %s", v.Needed)
		if v.LeaseDenied() {
			r.line("      not amended: %s", v.LeaseError)
			for _, c := range v.LeaseConflicts {
				r.line("      held by session %s (agent %s): %s  [%s]", c.Session, c.Agent, c.Lease, c.ID)
			}
		}
	}
}

// refused prints what klock's wall refused although the manifest declared
// it: klock's failure, reported with what the user can do about it.
func (r *renderer) refused(xs []Refused) {
	if len(xs) == 0 {
		return
	}
	r.section("Refused by klock's wall although declared (klock's failure, not the agent's)", len(xs))
	for _, x := range xs {
		r.line("  %s  %s  pid %d %s  %s, %d time(s)", clock(x.Time), x.Triple, x.PID, x.Comm, x.Syscall, x.Count)
		r.line("      declared by: %s", x.AllowedBy)
	}
	r.line("  The wall could not express these rules exactly; klock log -v lists its residuals. Run the agent")
	r.line("  with --backend bpf-lsm where the kernel has BPF LSM (klock doctor), and report the manifest and this log.")
}

// rollback prints each rollback operation and whether it succeeded.
func (r *renderer) rollback(ops []RollbackOp) {
	if len(ops) == 0 {
		return
	}
	r.section("Rollback", len(ops))
	for _, op := range ops {
		switch {
		case op.Action == RollbackLeft && op.OK:
			r.line("  %-9s %s  (%s)", op.Action, op.Path, op.Why)
		case op.Action == RollbackLeft:
			r.line("  %-9s %s  (%s)  FAILED: %s", op.Action, op.Path, op.Why, op.Error)
		case op.OK:
			r.line("  %-9s %s%s", op.Action, op.Path, inContainer(op))
		default:
			r.line("  %-9s %s%s  FAILED: %s", op.Action, op.Path, inContainer(op), op.Error)
		}
	}
}

// intrusions prints the files this session held a lease on that other
// sessions touched, and what their rollback did to them.
func (r *renderer) intrusions(xs []Intrusion) {
	if len(xs) == 0 {
		return
	}
	r.section("Touched by other sessions (files this session held a lease on)", len(xs))
	for _, x := range xs {
		r.line("  %s  %s  by session %s (agent %s)", clock(x.Time), x.Path, x.Session, x.Agent)
		if x.What != "" {
			r.line("      %s", x.What)
		}
		if x.OK {
			r.line("      its rollback: %s (to its state when that session began: check this session's later work on it)", x.PutBack)
		} else {
			r.line("      its rollback: %s FAILED: %s", x.PutBack, x.Error)
		}
	}
}

// amendments prints the leases learned during the session (Dynamic Lease
// Acquisition), noting those the kernel or the DNS proxy still refused.
func (r *renderer) amendments(as []Amendment, vs []Violation) {
	if len(as) == 0 {
		return
	}
	r.section("Amendments (Dynamic Lease Acquisition)", len(as))
	byProxy := map[string]bool{}
	for _, v := range vs {
		if v.ByDNSProxy() {
			byProxy[v.Triple] = true
		}
	}
	for _, a := range as {
		if a.PID == 0 && byProxy[a.Triple] {
			// The proxy's names and withheld addresses are the
			// manifest's: the lease is learned, the proxy refuses on.
			r.line("  %s  + %s  (the session's DNS proxy still refused it)", clock(a.Time), a.Intent)
			continue
		}
		note := ""
		if a.Blocked {
			note = "  (the kernel still refused this attempt)"
		}
		r.line("  %s  + %s  pid %d %s%s", clock(a.Time), a.Intent, a.PID, a.Comm, note)
	}
}

// intents prints each declared intent's use count, tagging those not from
// the manifest and those never used.
func (r *renderer) intents(ins []IntentUse) {
	r.section("Declared intents (uses)", len(ins))
	for _, in := range ins {
		tag := ""
		switch {
		case in.Origin != "manifest":
			tag = "  [" + in.Origin + "]"
		case in.Uses == 0:
			tag = "  (never used)"
		}
		r.line("  %8d  %s%s", in.Uses, in.Intent, tag)
	}
}

// baseline prints the baseline intents as one total line (every program
// reads the loader, libc and locale files), each of them on request.
func (r *renderer) baseline(bs []IntentUse, verbose bool) {
	if len(bs) == 0 {
		return
	}
	var uses uint64
	used := 0
	var names []string // system-ro, and dns when a host is declared
	for _, b := range bs {
		uses += b.Uses
		if b.Uses > 0 {
			used++
		}
		if n := strings.TrimPrefix(b.Origin, "baseline:"); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	r.line("  %8d  baseline %s: %d of %d intents used", uses, strings.Join(names, " + "), used, len(bs))
	if verbose {
		for _, b := range bs {
			r.line("  %8d    %s", b.Uses, b.Intent)
		}
	}
}

// unused prints the declared intents never used: under-utilization, not
// a violation.
func (r *renderer) unused(us []string) {
	if len(us) == 0 {
		return
	}
	r.section("Under-utilization (declared, never used; not a violation)", len(us))
	for _, u := range us {
		r.line("  %s", u)
	}
}

// lost prints the kernel's reports of events it dropped, so a reader knows
// the observed list may be short.
func (r *renderer) lost(lost Lost) {
	if len(lost.Reports) == 0 {
		return
	}
	r.section("Lost events", int(lost.Total))
	for _, x := range lost.Reports {
		r.line("  %s  %d lost → %s", clock(x.Time), x.Count, x.Action)
	}
}

// network prints the packet wall's and the relays' counters.
func (r *renderer) network(n *Network) {
	if n == nil {
		return
	}
	r.section("Network (bytes and packets out / in)", len(n.Peers))
	tw := tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
	for _, p := range n.Peers {
		over := ""
		if p.OverBudgetBytes > 0 {
			over = fmt.Sprintf("\t(%d B in %d packets past the budget, not delivered)", p.OverBudgetBytes, p.OverBudgetPackets)
		}
		fmt.Fprintf(tw, "  %s\t%d B / %d B\t%d / %d packets\t%s%s\n", p.Peer, p.OutBytes, p.InBytes, p.OutPackets, p.InPackets, p.Via, over)
	}
	r.err = firstErr(r.err, tw.Flush())
	budget := ""
	if n.MaxEgressBytes > 0 {
		budget = fmt.Sprintf(" (budget %d B", n.MaxEgressBytes)
		if n.Exceeded {
			budget += ": EXCEEDED"
		}
		budget += ")"
	}
	attempted := ""
	if n.AttemptedOutBytes > n.OutBytes {
		attempted = fmt.Sprintf(" delivered of %d B sent", n.AttemptedOutBytes)
	}
	r.line("  total %d B out%s%s, %d B in", n.OutBytes, attempted, budget, n.InBytes)
}

func (r *renderer) observed(l *Log, max int) {
	if len(l.Observed) == 0 {
		return
	}
	if max == 0 {
		max = 15
	}
	idx := make([]int, len(l.Observed))
	for i := range idx {
		idx[i] = i
	}
	// Violations first, then what the manifest's own intents allowed, then
	// the baseline's (the loader, libc and locale files every program
	// reads): those are the most frequent, and the least telling.
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := &l.Observed[idx[a]], &l.Observed[idx[b]]
		if x.Violation != y.Violation {
			return x.Violation
		}
		if x.Baseline != y.Baseline {
			return y.Baseline
		}
		return x.Count > y.Count
	})
	r.section("Observed (distinct triples)", len(l.Observed))
	tw := tabwriter.NewWriter(r.w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "count\tfirst\tpid\t\n")
	shown, baselineLeft := 0, 0
	for n, i := range idx {
		o := &l.Observed[i]
		if max > 0 && shown >= max && !o.Violation {
			for _, j := range idx[n:] {
				if l.Observed[j].Baseline {
					baselineLeft++
				}
			}
			break
		}
		shown++
		mark := ""
		switch {
		case o.Violation && o.AllowedBy == "":
			mark = "  VIOLATION"
		case o.Violation:
			mark = "  VIOLATION, then " + o.AllowedBy
		case o.AllowedBy != "":
			mark = "  ← " + o.AllowedBy
		}
		if o.Blocked > 0 {
			mark += fmt.Sprintf(" [%d blocked]", o.Blocked)
		}
		// Attempts that failed on their own (no such file, EXDEV...):
		// listed, but they did nothing.
		if n := o.Failed - min(o.Failed, o.Blocked); n > 0 {
			mark += fmt.Sprintf(" [%d failed]", n)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t %s  %s%s\n", o.Count, clock(o.First), o.PID, o.Comm, o.Triple, mark)
	}
	r.err = firstErr(r.err, tw.Flush())
	switch rest := len(l.Observed) - shown; {
	case rest == 0:
	case rest == baselineLeft:
		r.line("  … %d more, all allowed by the baseline (klock log -v lists them)", rest)
	case baselineLeft > 0:
		r.line("  … %d more, %d of them allowed by the baseline (klock log -v lists them)", rest, baselineLeft)
	default:
		r.line("  … %d more (klock log -v lists them)", rest)
	}
	r.counted(l)
}

// counted says how many reads were counted below a directory, not listed.
func (r *renderer) counted(l *Log) {
	if len(l.Counted) == 0 {
		return
	}
	for _, c := range l.Counted {
		r.line("  + %d more reads below %s counted in the kernel, all allowed by %s (recording %q; --record all lists each)", c.Count, c.Dir, c.AllowedBy, l.Recording)
	}
}

type renderer struct {
	w   io.Writer
	err error
}

func (r *renderer) line(format string, args ...any) {
	if r.err != nil {
		return
	}
	_, r.err = fmt.Fprintf(r.w, format+"\n", args...)
}

func (r *renderer) section(title string, n int) {
	r.line("")
	r.line("%s: %d", title, n)
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "--:--:--.---"
	}
	return t.UTC().Format("15:04:05.000")
}

func span(a, b time.Time) string {
	if a.IsZero() {
		return "unknown"
	}
	s := a.UTC().Format(time.RFC3339)
	if b.IsZero() {
		return s + " → (no end recorded)"
	}
	return fmt.Sprintf("%s → %s (%s)", s, b.UTC().Format(time.RFC3339), b.Sub(a).Round(time.Millisecond))
}

// killLatency says how long after the first violation klock killed the
// session: how long the agent ran on ("" when klock did not kill it, when
// the agent had exited already, or when the log has no violation time).
func killLatency(l *Log) string {
	if l.Exit.KilledAt.IsZero() || l.Exit.Signal == "" || len(l.Violations) == 0 || l.Violations[0].Time.IsZero() {
		return ""
	}
	d := l.Exit.KilledAt.Sub(l.Violations[0].Time)
	if d < 0 {
		d = 0
	}
	return fmt.Sprintf("; killed %s after the violation", d.Round(10*time.Microsecond))
}

// Text is how the agent ended, as the log prints it: its exit code or
// signal, and whether klock ended it.
func (e Exit) Text() string {
	var s string
	switch {
	case e.Signal != "":
		s = "signal " + e.Signal
	case e.Code != nil:
		s = fmt.Sprintf("exit code %d", *e.Code)
	default:
		s = "unknown"
	}
	switch {
	case e.KilledByKlock && e.Code != nil:
		// Killed with a code, not a signal: the agent had exited on its
		// own by the time the violation was read (detected after the
		// effect, just before the end), and the kill found no process.
		s += ", then ended by klock: it read the violation after the agent had exited"
	case e.KilledByKlock:
		s = "killed by klock (" + s + ")"
	}
	return s
}

// inContainer names a rolled-back host path as the container saw it.
func inContainer(op RollbackOp) string {
	if op.ContainerPath == "" {
		return ""
	}
	return "  (" + op.ContainerPath + " in the container)"
}
