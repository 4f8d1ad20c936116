//go:build linux

package leaseapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// storeError answers a store's failure: a request it cannot decide is the
// caller's fault, anything else is klockd's (and logged).
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, lease.ErrInvalid):
		writeError(w, newError(ClassBadRequest, "%v", err))
	case s.ctx.Err() != nil:
		writeError(w, newError(ClassShuttingDown, "klockd is shutting down"))
	case r.Context().Err() != nil:
		// the caller went away: nobody reads an answer
	default:
		s.log.Error("lease API: store failed", "path", r.URL.Path, "error", err)
		writeError(w, newError(ClassInternal, "the lease store failed: %v", err))
	}
}

// visible reports whether id may see l.
func visible(id Identity, l *lease.Lease) bool { return id.Admin || l.Holder.Tenant == id.Tenant }

// scope is the Filter of the leases id may see.
func scope(id Identity) lease.Filter {
	if id.Admin {
		return lease.Filter{}
	}
	return lease.Filter{Tenant: id.Tenant}
}

func conflictView(c *lease.Conflict, id Identity, now time.Time) Conflict {
	v := Conflict{Intent: c.Claim.Intent, Predicate: c.Claim.Predicate.String(), Outcome: c.Outcome.String()}
	if visible(id, &c.Held) {
		v.Held = view(&c.Held, now)
	} else {
		v.Held = redacted(&c.Held, now)
	}
	return v
}

// manifest is POST /v1/manifest: acquire, whole, with Wait-Die.
func (s *Server) manifest(w http.ResponseWriter, r *http.Request, id Identity) {
	now := time.Now()
	if d := s.limits.take(id.Tenant, now); d > 0 {
		e := newError(ClassRateLimited, "tenant %s acquires faster than its limit (%g per second, burst %d); retry in %s",
			id.Tenant, s.cfg.Rate, s.cfg.Burst, d.Round(time.Millisecond))
		e.RetryAfterMS = ms(d)
		writeError(w, e)
		return
	}
	body, e := readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	mr, e := decodeManifest(body, now)
	if e != nil {
		writeError(w, e)
		return
	}
	mr.req.Holder.Tenant = id.Tenant
	freed := s.waiters.freed.Load()
	d, err := s.store.Acquire(r.Context(), mr.req)
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	var waited time.Duration
	if d.Outcome == lease.Wait && mr.wait > 0 && s.waiting.take(id.Tenant, maxWaiters) {
		defer s.waiting.release(id.Tenant)
		start := time.Now()
		d, err = s.waiters.wait(r.Context(), mr.req, d, start.Add(mr.wait), freed)
		waited = time.Since(start)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
	}
	if d.Outcome == lease.Granted && r.Context().Err() != nil {
		// Granted to a caller that went away while it waited: it will
		// never heartbeat them, so free them now rather than at expiry.
		ids := make([]string, d.NumLeases())
		for i := range ids {
			ids[i] = d.LeaseID(i)
		}
		_, _ = s.store.Release(context.WithoutCancel(r.Context()), mr.req.Holder, ids...)
		return
	}
	s.answer(w, id, &mr, &d, waited)
}

// answer writes a decision: 200 GRANTED, 409 DIE or WAIT.
func (s *Server) answer(w http.ResponseWriter, id Identity, mr *manifestReq, d *lease.Decision, waited time.Duration) {
	now := time.Now()
	resp := ManifestResponse{Outcome: d.Outcome.String(), Timestamp: d.Age.UnixMilli(), Unleased: mr.unleased, WaitedMS: ms(waited)}
	if d.Outcome == lease.Granted {
		resp.OK, resp.Success = true, true
		resp.Leases = make([]Lease, d.NumLeases())
		for i := range resp.Leases {
			l := d.Lease(i)
			resp.Leases[i] = view(&l, now)
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	resp.Reason = resp.Outcome
	resp.ErrorClass, resp.Retryable = ClassDie, true
	if d.Outcome == lease.Wait {
		resp.ErrorClass = ClassWait
	}
	resp.WaitTime = ms(d.WaitTime)
	resp.Conflicts = make([]Conflict, len(d.Conflicts))
	for i := range d.Conflicts {
		resp.Conflicts[i] = conflictView(&d.Conflicts[i], id, now)
	}
	slices.SortFunc(resp.Conflicts, func(a, b Conflict) int {
		return cmp.Or(cmp.Compare(a.Intent, b.Intent), cmp.Compare(a.Held.LeaseID, b.Held.LeaseID), cmp.Compare(a.Held.ExpiresInMS, b.Held.ExpiresInMS))
	})
	resp.Message = decisionMessage(&resp)
	writeJSON(w, http.StatusConflict, resp)
}

// decisionMessage says what a DIE or WAIT means for the caller, naming
// its first conflict.
func decisionMessage(r *ManifestResponse) string {
	var b strings.Builder
	b.WriteString(r.Outcome)
	if len(r.Conflicts) > 0 {
		c := r.Conflicts[0]
		fmt.Fprintf(&b, ": your intent %s conflicts with ", c.Intent)
		if c.Held.Redacted {
			fmt.Fprintf(&b, "another tenant's %s lease", c.Held.Predicate)
		} else {
			fmt.Fprintf(&b, "lease %s (%s %s) of agent %s session %s", c.Held.LeaseID, c.Held.Predicate, c.Held.Object, c.Held.AgentID, c.Held.SessionID)
		}
		if n := len(r.Conflicts) - 1; n > 0 {
			fmt.Fprintf(&b, " (and %d more conflict(s))", n)
		}
	}
	if r.Outcome == lease.Die.String() {
		fmt.Fprintf(&b, "; its holder is older: give up what you hold and retry later with timestamp %d", r.Timestamp)
	} else {
		fmt.Fprintf(&b, "; its holder is younger: retry with timestamp %d (wait_timeout_ms waits in klockd)", r.Timestamp)
	}
	if r.WaitTime > 0 {
		fmt.Fprintf(&b, "; it runs out in %s unless heartbeated", (time.Duration(r.WaitTime) * time.Millisecond).String())
	}
	return b.String()
}

// heartbeat is POST /v1/leases/heartbeat.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, id Identity) {
	t, hs, ok := readTargets(w, r, true)
	if !ok {
		return
	}
	ctx := r.Context()
	resp := HeartbeatResponse{OK: true}
	done := map[lease.Holder]ItemResult{}
	beat := func(h lease.Holder) (ItemResult, error) {
		if res, ok := done[h]; ok {
			return res, nil
		}
		res := ItemResult{AgentID: h.Agent, SessionID: h.Session}
		until, err := s.store.Heartbeat(ctx, h)
		switch {
		case err == nil:
			res.OK, res.ExpiresAt, res.ExpiresInMS = true, until, ms(time.Until(until))
		case errors.Is(err, lease.ErrGone):
			res.ErrorClass, res.Message = ClassGone, fmt.Sprintf("session %s of agent %s holds no active lease (expired, released or revoked): acquire again", h.Session, h.Agent)
		default:
			return res, err
		}
		done[h] = res
		return res, nil
	}
	for _, h := range hs {
		h.Tenant = id.Tenant
		res, err := beat(h)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		resp.Results = append(resp.Results, res)
	}
	if len(t.LeaseIDs) > 0 {
		held, err := s.held(ctx, id)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		for _, lid := range t.LeaseIDs {
			l, ok := held[lid]
			if !ok {
				resp.Results = append(resp.Results, ItemResult{LeaseID: lid, ErrorClass: ClassNotFound,
					Message: fmt.Sprintf("no active lease %s of yours (it expired, was released or revoked, or is not yours)", lid)})
				continue
			}
			res, err := beat(l.Holder)
			if err != nil {
				s.storeError(w, r, err)
				return
			}
			res.LeaseID = lid
			resp.Results = append(resp.Results, res)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// held maps the id of every lease id may see to it.
func (s *Server) held(ctx context.Context, id Identity) (map[string]*lease.Lease, error) {
	ls, err := s.store.List(ctx, scope(id))
	if err != nil {
		return nil, err
	}
	m := make(map[string]*lease.Lease, len(ls))
	for i := range ls {
		m[ls[i].ID] = &ls[i]
	}
	return m, nil
}

// release is POST /v1/leases/release: all or nothing over the lease ids
// named (any that is not an active lease the caller may see refuses the
// whole request), then every lease of the sessions named.
func (s *Server) release(w http.ResponseWriter, r *http.Request, id Identity) {
	t, hs, ok := readTargets(w, r, true)
	if !ok {
		return
	}
	if (t.AgentID != "" || t.SessionID != "") && len(t.LeaseIDs) > 0 {
		writeError(w, badField("lease_ids", "agent_id and session_id with lease_ids is ambiguous: to free some leases of a session name only their lease_ids; to free all of it name only the session"))
		return
	}
	ctx := r.Context()
	n := 0
	if len(t.LeaseIDs) > 0 {
		held, err := s.held(ctx, id)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		own := map[lease.Holder][]string{}
		var foreign []string
		for i, lid := range t.LeaseIDs {
			l, ok := held[lid]
			switch {
			case !ok:
				writeError(w, notFoundField(fmt.Sprintf("lease_ids[%d]", i), "no active lease %s of yours (it expired, was released or revoked, or is not yours); nothing was released", lid))
				return
			case l.Holder.Tenant == id.Tenant:
				own[l.Holder] = append(own[l.Holder], lid)
			default: // the admin frees another tenant's lease: a revocation
				foreign = append(foreign, lid)
			}
		}
		for h, ids := range own {
			k, err := s.store.Release(ctx, h, ids...)
			if err != nil {
				s.storeError(w, r, err)
				return
			}
			n += k
		}
		for _, lid := range foreign {
			k, err := s.store.Revoke(ctx, lid)
			if err != nil {
				s.storeError(w, r, err)
				return
			}
			n += k
		}
	}
	for _, h := range hs {
		h.Tenant = id.Tenant
		k, err := s.store.Release(ctx, h)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		n += k
	}
	writeJSON(w, http.StatusOK, ReleaseResponse{OK: true, Released: n})
}

func notFoundField(field, format string, a ...any) *Error {
	e := newError(ClassNotFound, format, a...)
	e.Field = field
	return e
}

// reconcile is POST /v1/leases/reconcile.
func (s *Server) reconcile(w http.ResponseWriter, r *http.Request, id Identity) {
	t, hs, ok := readTargets(w, r, false)
	if !ok {
		return
	}
	// What a client holds is its own tenant's, the admin's too.
	ls, err := s.store.List(r.Context(), lease.Filter{Tenant: id.Tenant})
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	now := time.Now()
	byID := make(map[string]*lease.Lease, len(ls))
	for i := range ls {
		byID[ls[i].ID] = &ls[i]
	}
	inScope := func(l *lease.Lease) bool {
		if len(hs) == 0 {
			return true
		}
		for _, h := range hs {
			if l.Holder.Agent == h.Agent && l.Holder.Session == h.Session {
				return true
			}
		}
		return false
	}
	resp := ReconcileResponse{OK: true, Active: []Lease{}, Gone: []string{}, Unlisted: []Lease{}}
	listed := make(map[string]bool, len(t.LeaseIDs))
	for _, lid := range t.LeaseIDs {
		if listed[lid] {
			continue
		}
		listed[lid] = true
		if l, ok := byID[lid]; ok {
			resp.Active = append(resp.Active, view(l, now))
		} else {
			resp.Gone = append(resp.Gone, lid)
		}
	}
	for i := range ls {
		if l := &ls[i]; !listed[l.ID] && inScope(l) {
			resp.Unlisted = append(resp.Unlisted, view(l, now))
		}
	}
	sortLeases(resp.Unlisted)
	writeJSON(w, http.StatusOK, resp)
}

// revoke is POST /v1/leases/revoke: the admin revokes whoever holds the
// lease or session (KLIS FORCE_REVOKE); anyone else frees only its own.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request, id Identity) {
	body, e := readBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	var rq RevokeRequest
	if e := decodeStrict(body, &rq); e != nil {
		writeError(w, e)
		return
	}
	if e := checkID("id", rq.ID); e != nil {
		writeError(w, e)
		return
	}
	ctx := r.Context()
	n := 0
	if id.Admin {
		k, err := s.store.Revoke(ctx, rq.ID)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		n = k
	} else {
		ls, err := s.store.List(ctx, lease.Filter{Tenant: id.Tenant})
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		mine := map[lease.Holder][]string{}
		for _, l := range ls {
			if l.ID == rq.ID || l.Holder.Session == rq.ID {
				mine[l.Holder] = append(mine[l.Holder], l.ID)
			}
		}
		for h, ids := range mine {
			k, err := s.store.Release(ctx, h, ids...)
			if err != nil {
				s.storeError(w, r, err)
				return
			}
			n += k
		}
	}
	if n == 0 {
		writeError(w, notFoundField("id", "no active lease or session %q of yours", rq.ID))
		return
	}
	s.log.Info("lease API: revoked", "id", rq.ID, "leases", n, "by", id.Who, "tenant", id.Tenant)
	writeJSON(w, http.StatusOK, RevokeResponse{OK: true, Revoked: n})
}

// list is GET /v1/leases[?session=S][&tenant=T (admin)].
func (s *Server) list(w http.ResponseWriter, r *http.Request, id Identity) {
	f := scope(id)
	q := r.URL.Query()
	if t := q.Get("tenant"); t != "" {
		if !id.Admin && t != id.Tenant {
			writeError(w, &Error{Class: ClassForbidden, Message: "only the admin may list another tenant's leases", Field: "tenant"})
			return
		}
		f.Tenant = t
	}
	f.Session = q.Get("session")
	ls, err := s.store.List(r.Context(), f)
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	now := time.Now()
	resp := ListResponse{OK: true, Leases: make([]Lease, 0, len(ls))}
	for i := range ls {
		resp.Leases = append(resp.Leases, view(&ls[i], now))
	}
	sortLeases(resp.Leases)
	writeJSON(w, http.StatusOK, resp)
}

func sortLeases(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), a.AcquiredAt.Compare(b.AcquiredAt), cmp.Compare(a.LeaseID, b.LeaseID))
	})
}

// state is GET /v1/resource/{object}/state.
func (s *Server) state(w http.ResponseWriter, r *http.Request, id Identity) {
	obj := r.PathValue("object")
	res, err := lease.ParseResource(obj)
	if err != nil {
		writeError(w, badField("object", "%v", err))
		return
	}
	ls, err := s.store.List(r.Context(), lease.Filter{Overlapping: &res})
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	now := time.Now()
	resp := StateResponse{OK: true, Object: res.String(), Leases: []Lease{}}
	for i := range ls {
		if visible(id, &ls[i]) {
			resp.Leases = append(resp.Leases, view(&ls[i], now))
		} else {
			resp.Hidden++
		}
	}
	sortLeases(resp.Leases)
	writeJSON(w, http.StatusOK, resp)
}

// contentionView is a ContentionDetected as id may see it: its own
// requests whole (other tenants' held leases redacted), and others'
// requests only where they met id's leases, the requester redacted. ok is
// false when id may see nothing of it.
func contentionView(e *lease.Event, count int, id Identity, now time.Time) (Contention, bool) {
	if e.Decision == nil {
		return Contention{}, false
	}
	own := id.Admin || e.Holder.Tenant == id.Tenant
	c := Contention{Time: e.Time, Outcome: e.Decision.Outcome.String(), Count: count, Conflicts: []Conflict{}}
	for i := range e.Decision.Conflicts {
		k := &e.Decision.Conflicts[i]
		if !own && !visible(id, &k.Held) {
			continue
		}
		cv := conflictView(k, id, now)
		if !own {
			cv.Intent = ""
		}
		c.Conflicts = append(c.Conflicts, cv)
	}
	if !own {
		if len(c.Conflicts) == 0 {
			return c, false
		}
		c.Requester = Holder{Redacted: true}
		return c, true
	}
	c.Requester = Holder{Tenant: e.Holder.Tenant, AgentID: e.Holder.Agent, SessionID: e.Holder.Session}
	c.Timestamp, c.WaitTime = e.Decision.Age.UnixMilli(), ms(e.Decision.WaitTime)
	return c, true
}

// contention is GET /v1/contention.
func (s *Server) contention(w http.ResponseWriter, r *http.Request, id Identity) {
	s.catchUp()
	now := time.Now()
	resp := ContentionResponse{OK: true, Recent: []Contention{}, Waiting: []Waiting{}}
	for _, en := range s.ring.newest() {
		if c, ok := contentionView(&en.ev, en.count, id, now); ok {
			resp.Recent = append(resp.Recent, c)
		}
	}
	for _, wt := range s.waiters.snapshot() {
		ev := lease.Event{Type: lease.ContentionDetected, Time: wt.lastAt, Holder: wt.req.Holder, Decision: &wt.last}
		c, ok := contentionView(&ev, 0, id, now)
		if !ok {
			continue
		}
		resp.Waiting = append(resp.Waiting, Waiting{Requester: c.Requester, Timestamp: c.Timestamp, Since: wt.since,
			Deadline: wt.deadline, Conflicts: c.Conflicts})
	}
	writeJSON(w, http.StatusOK, resp)
}

// readTargets reads and decodes the body of a request that names leases
// or sessions (heartbeat, release, reconcile); a bad one is answered here
// (ok false).
func readTargets(w http.ResponseWriter, r *http.Request, need bool) (Targets, []lease.Holder, bool) {
	body, e := readBody(w, r)
	if e == nil {
		var t Targets
		var hs []lease.Holder
		if t, hs, e = decodeTargets(body, need); e == nil {
			return t, hs, true
		}
	}
	writeError(w, e)
	return Targets{}, nil, false
}
