package eventlog

import (
	"fmt"
	"strconv"
	"strings"
)

// Text renders r as one line for a person: time, kind, session, then
// what the kind says. Strings the agent named are quoted when they hold
// anything a terminal would act on.
func Text(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-14s", r.Time.Format("2006-01-02T15:04:05.000Z07:00"), r.Kind)
	if r.Session != "" {
		fmt.Fprintf(&b, " session=%s", r.Session)
	}
	if r.Agent != "" {
		fmt.Fprintf(&b, " agent=%s", safe(r.Agent))
	}
	if d := detail(r); d != "" {
		b.WriteString(" ")
		b.WriteString(d)
	}
	return b.String()
}

func detail(r Record) string {
	switch {
	case r.Start != nil:
		return fmt.Sprintf("mode=%s pid=%d command=%s", r.Mode, r.Start.PID, safe(strings.Join(r.Start.Command, " ")))
	case r.End != nil:
		e := r.End
		return fmt.Sprintf("verdict=%s exit=%s violations=%d log=%s", e.Verdict, e.Exit, e.Violations, safe(e.LogPath))
	case r.Violation != nil:
		return fmt.Sprintf("%s %s (%s)", r.Violation.Action, safe(r.Violation.Error), opText(r.Op))
	case r.Op != nil:
		return opText(r.Op)
	case r.Rollback != nil:
		x := r.Rollback
		s := fmt.Sprintf("%s %s ok=%t", x.Action, safe(x.Path), x.OK)
		if x.Error != "" {
			s += " error=" + safe(x.Error)
		}
		return s
	case r.Lease != nil:
		l := r.Lease
		if r.Kind == KindLeaseGrant {
			return fmt.Sprintf("count=%d leases=%s", l.Count, safe(strings.Join(l.Leases, ", ")))
		}
		s := strings.TrimSpace(l.ID + " " + l.Predicate + " " + safe(l.Object))
		if l.Holder != "" {
			s += " holder=" + l.Holder
		}
		if l.Count != 0 {
			s += fmt.Sprintf(" count=%d", l.Count)
		}
		return s
	case r.Tool != nil:
		t := r.Tool
		return fmt.Sprintf("tool=%s call=%s approver=%s reason=%s", safe(t.Name), t.Call, safe(t.Approver), safe(t.Reason))
	case r.Kind == KindLost:
		return fmt.Sprintf("lost=%d (this reader read too slowly; each session's verification log still holds its decisions)", r.Lost)
	case r.Reason != "":
		return "reason=" + safe(r.Reason)
	}
	return ""
}

func opText(o *Op) string {
	if o == nil {
		return ""
	}
	s := o.Predicate + " " + safe(o.Object)
	if o.PID != 0 {
		s += fmt.Sprintf(" pid=%d comm=%s", o.PID, safe(o.Comm))
	}
	if o.Syscall != "" {
		s += " syscall=" + safe(o.Syscall)
	}
	if o.Blocked {
		s += " blocked"
	}
	return s
}

// safe quotes s when it holds a space, quote, control or non-printable
// character.
func safe(s string) string {
	for _, c := range s {
		if c <= ' ' || c == '"' || c == 0x7f || !strconv.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}
