package vlog

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/policy"
)

// Session is what the caller knows about the session.
type Session struct {
	ID           string
	Agent        string
	ManifestPath string
	// ManifestBytes are hashed into the log (sha256); ManifestSHA256 is
	// used instead when set.
	ManifestBytes  []byte
	ManifestSHA256 string
	Mode           policy.Mode
	Start          time.Time
	Backends       []Backend
	// Leases and LeaseWait are Log's.
	Leases    []HeldLease
	LeaseWait *LeaseWait
	Container *Container
	// Network is Log's.
	Network *Network
	// Canaries are Log's.
	Canaries []Canary
}

// HashManifest is the hex sha256 of the manifest bytes.
func HashManifest(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// New starts a log for a session.
func New(s Session) *Log {
	sum := s.ManifestSHA256
	if sum == "" && s.ManifestBytes != nil {
		sum = HashManifest(s.ManifestBytes)
	}
	return &Log{
		Schema: Schema, Session: s.ID, Agent: s.Agent,
		Manifest: ManifestRef{Path: s.ManifestPath, SHA256: sum},
		Mode:     s.Mode, Start: s.Start,
		Backends: append([]Backend(nil), s.Backends...),
		Leases:   append([]HeldLease(nil), s.Leases...), LeaseWait: s.LeaseWait,
		Container: s.Container, Network: s.Network,
		Canaries: append([]Canary(nil), s.Canaries...),
	}
}

// AddRecords fills the log from the decision engine's records, replacing
// what it held of them.
func (l *Log) AddRecords(r decide.Records) {
	if l.Mode == "" {
		l.Mode = r.Mode
	}
	l.addIntents(r)
	l.addObserved(r)
	l.addViolations(r)
	l.Amendments = nil
	for _, a := range r.Amendments {
		l.Amendments = append(l.Amendments, Amendment{
			Time: a.Time, Intent: a.Intent.String(), Triple: a.Triple.String(), PID: a.PID, Comm: a.Comm, Blocked: a.Blocked,
		})
	}
	l.Refused = nil
	for _, x := range r.Refused {
		l.Refused = append(l.Refused, Refused{Time: x.Time, Triple: x.Triple.String(), AllowedBy: x.AllowedBy, Count: x.Count,
			PID: x.PID, Comm: x.Comm, Syscall: x.Syscall, Source: string(x.Source), Errno: x.Errno})
	}
	l.Created = append([]string(nil), r.Created...)
	l.Lost = Lost{Total: r.LostTotal}
	for _, x := range r.Lost {
		l.Lost.Reports = append(l.Lost.Reports, LostReport{Time: x.Time, Count: x.Count, Action: x.Action.String()})
	}
	l.Events = r.Events
	if r.Kill != nil {
		l.Exit.KilledByKlock = true
		if l.Exit.Reason == "" {
			l.Exit.Reason = r.Kill.Message()
		}
	}
}

// addIntents fills the declared intents and the baseline's, apart, with
// their use counts, and the declared intents that allowed nothing.
func (l *Log) addIntents(r decide.Records) {
	l.Intents, l.Baseline, l.Unused = nil, nil, nil
	for i, in := range r.Intents {
		u := IntentUse{Intent: in.String(), Origin: origin(in), Uses: r.Uses[i]}
		if decide.IsBaseline(in) {
			l.Baseline = append(l.Baseline, u)
		} else {
			l.Intents = append(l.Intents, u)
		}
	}
	for _, i := range r.Unused() {
		l.Unused = append(l.Unused, r.Intents[i].String())
	}
}

// addObserved fills the observed triples, each with what allowed it.
func (l *Log) addObserved(r decide.Records) {
	// What each intent is called where it allowed an observed triple,
	// made once per intent rather than once per triple.
	allowedBy := make([]string, len(r.Intents))
	for i, in := range r.Intents {
		allowedBy[i] = in.String()
		if or := origin(in); or != "manifest" {
			allowedBy[i] += " (" + or + ")"
		}
	}
	l.Observed = make([]Observed, 0, len(r.Observed))
	for _, o := range r.Observed {
		ob := Observed{
			Triple: o.Triple.String(), Count: o.Count, Blocked: o.Blocked, Failed: o.Failed,
			First: o.First, PID: o.PID, Comm: o.Comm, Syscall: o.Syscall, Source: string(o.Source),
			Violation: o.Violation, Referred: o.Referred,
		}
		switch {
		case o.Intent >= 0 && o.Intent < len(r.Intents):
			ob.AllowedBy = allowedBy[o.Intent]
			ob.Baseline = decide.IsBaseline(r.Intents[o.Intent])
		case o.Created:
			ob.AllowedBy = "created by the session"
		case o.Unnamed:
			ob.AllowedBy = "a file with no name left (unlinked, O_TMPFILE): no one else reaches it"
		case o.WallExact:
			ob.AllowedBy = "its name could not be read, and the wall lets through only what the manifest declares for it"
		}
		l.Observed = append(l.Observed, ob)
	}
	l.Counted = nil
	for _, c := range r.Counted {
		by := ""
		if c.Intent >= 0 && c.Intent < len(r.Intents) {
			by = allowedBy[c.Intent]
		}
		l.Counted = append(l.Counted, Counted{Dir: c.Dir, Predicate: policy.Consumes.String(), Count: c.Count,
			AllowedBy: by, First: c.First, PID: c.PID, Comm: c.Comm})
	}
}

// addViolations fills the violations, each with the leases that conflicted
// with its amendment.
func (l *Log) addViolations(r decide.Records) {
	l.Violations = make([]Violation, 0, len(r.Violations))
	for _, v := range r.Violations {
		path := v.Triple.Path
		if v.Triple.Type == policy.ObjNet {
			path = v.Triple.ObjectString()
		}
		x := Violation{
			Time: v.Time, Triple: v.Triple.String(), Path: path, Via: v.Via, Error: v.Error, Needed: v.Needed,
			Declared: v.Declared.String(), Blocked: v.Blocked, Errno: v.Errno, Action: v.Action.String(), Lease: v.Lease,
			LeaseError: v.LeaseError, PID: v.PID, Comm: v.Comm, Syscall: v.Syscall, Source: string(v.Source),
		}
		for _, c := range v.Conflicts {
			x.LeaseConflicts = append(x.LeaseConflicts, LeaseConflict{ID: c.ID, Session: c.Session, Agent: c.Agent, Lease: c.Lease})
		}
		l.Violations = append(l.Violations, x)
	}
}

func origin(in policy.Intent) string {
	if in.Origin == "" {
		return "manifest"
	}
	return in.Origin
}

// Finish records the rollback actions, the end time and the exit status,
// and fills the headline.
func (l *Log) Finish(end time.Time, exit Exit, rollback []RollbackOp) {
	l.End = end
	killed := l.Exit.KilledByKlock || exit.KilledByKlock
	reason := exit.Reason
	if reason == "" {
		reason = l.Exit.Reason
	}
	l.Exit = exit
	l.Exit.KilledByKlock, l.Exit.Reason = killed, reason
	l.Rollback = append([]RollbackOp(nil), rollback...)
	l.Verdict, l.Summary = l.Headline()
}

// ExitCode is a helper for Exit.Code.
func ExitCode(code int) *int { return &code }
