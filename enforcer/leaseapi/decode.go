package leaseapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

// Bounds of a request.
const (
	// MaxBody bounds a request body.
	MaxBody = 1 << 20
	// MaxIntents bounds a manifest; MaxItems a bulk request.
	MaxIntents = 10000
	MaxItems   = 10000
	// MaxIDLen bounds agent, session and lease ids.
	MaxIDLen = 256
	// MaxWait bounds wait_timeout_ms: a client that wants to wait longer
	// asks again with the same timestamp.
	MaxWait = 5 * time.Minute
	// maxSkew is how far in the future a timestamp may be (clock skew
	// between the client and klockd); maxAgeBack how far in the past (a
	// retry loop keeps its first attempt's time, never a day's).
	maxSkew    = 5 * time.Second
	maxAgeBack = 24 * time.Hour
)

// readBody reads at most MaxBody bytes of r's body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, newError(ClassTooLarge, "the request body is larger than %d bytes", MaxBody)
		}
		return nil, newError(ClassBadRequest, "read the request body: %v", err)
	}
	return b, nil
}

// decodeStrict decodes one JSON object into v: unknown fields, a wrong
// type and trailing data are bad requests naming where.
func decodeStrict(body []byte, v any) *Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, "")
	}
	if dec.More() {
		return newError(ClassBadRequest, "trailing data after the JSON object (at byte %d)", dec.InputOffset())
	}
	if _, err := dec.Token(); err != io.EOF {
		return newError(ClassBadRequest, "trailing data after the JSON object (at byte %d)", dec.InputOffset())
	}
	return nil
}

// jsonError locates a decoding error; prefix is the path of the value
// being decoded ("intents[3]").
func jsonError(err error, prefix string) *Error {
	var (
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badField(prefix, "empty body; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badField(prefix, "the JSON is cut short")
	case errors.As(err, &se):
		return badField(prefix, "not JSON: %v (at byte %d)", se, se.Offset)
	case errors.As(err, &te):
		return badField(join(prefix, te.Field), "want %s, got JSON %s", te.Type, te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return badField(join(prefix, name), "unknown field %q", name)
	}
	return badField(prefix, "%v", err)
}

func join(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

// checkID refuses an empty, overlong or unprintable id: ids are shown in
// klock leases and in other tenants' conflicts.
func checkID(field, v string) *Error {
	switch {
	case v == "":
		return badField(field, "required")
	case len(v) > MaxIDLen:
		return badField(field, "longer than %d bytes", MaxIDLen)
	case !utf8.ValidString(v):
		return badField(field, "not valid UTF-8")
	case strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return badField(field, "has an unprintable character")
	}
	return nil
}

// manifestWire is POST /v1/manifest as it arrives.
type manifestWire struct {
	AgentID       string            `json:"agent_id"`
	SessionID     string            `json:"session_id"`
	Intents       []json.RawMessage `json:"intents"`
	Timestamp     *int64            `json:"timestamp"`
	TTLMS         *int64            `json:"ttl_ms"`
	GraceMS       *int64            `json:"grace_ms"`
	WaitTimeoutMS *int64            `json:"wait_timeout_ms"`
}

// intentWire is KLIS's map form of an intent.
type intentWire struct {
	Subject    string `json:"subject"`
	Predicate  string `json:"predicate"`
	Object     string `json:"object"`
	Confidence string `json:"confidence"`
	Reason     string `json:"reason"`
	Timestamp  *int64 `json:"timestamp"`
}

// manifestReq is a decoded manifest request. Holder.Tenant is left for
// the caller: it is the transport's, never the body's.
type manifestReq struct {
	req      lease.Request
	unleased []Unleased
	wait     time.Duration
}

// decodeManifest decodes and checks a manifest request at now.
func decodeManifest(body []byte, now time.Time) (manifestReq, *Error) {
	var (
		m   manifestWire
		out manifestReq
	)
	if e := decodeStrict(body, &m); e != nil {
		return out, e
	}
	if e := checkID("agent_id", m.AgentID); e != nil {
		return out, e
	}
	if e := checkID("session_id", m.SessionID); e != nil {
		return out, e
	}
	if strings.HasPrefix(m.SessionID, "l-") {
		return out, badField("session_id", "may not start with \"l-\": that prefix names lease ids (klock leases revoke takes either)")
	}
	out.req.Holder = lease.Holder{Agent: m.AgentID, Session: m.SessionID}
	switch {
	case m.Intents == nil:
		return out, badField("intents", "required: a list of intents such as \"MUTATES FILE:/srv/repo/src/**\"")
	case len(m.Intents) == 0:
		return out, badField("intents", "empty: a manifest acquires at least one intent")
	case len(m.Intents) > MaxIntents:
		return out, badField("intents", "%d intents; at most %d in one manifest", len(m.Intents), MaxIntents)
	}
	var age time.Time
	older := func(field string, ts *int64) *Error {
		if ts == nil {
			return nil
		}
		t, e := checkTimestamp(field, *ts, now)
		if e != nil {
			return e
		}
		if age.IsZero() || t.Before(age) {
			age = t
		}
		return nil
	}
	if e := older("timestamp", m.Timestamp); e != nil {
		return out, e
	}
	for i, raw := range m.Intents {
		field := fmt.Sprintf("intents[%d]", i)
		in, ts, e := decodeIntent(field, raw, m.AgentID)
		if e != nil {
			return out, e
		}
		if e := older(field+".timestamp", ts); e != nil {
			return out, e
		}
		c, ok, why := lease.FromIntent(in)
		if !ok {
			out.unleased = append(out.unleased, Unleased{Intent: in.String(), Why: why})
			continue
		}
		out.req.Claims = append(out.req.Claims, c)
	}
	out.req.Age = age
	var e *Error
	if out.req.TTL, e = duration("ttl_ms", m.TTLMS, 1, lease.MaxTTL); e != nil {
		return out, e
	}
	if out.req.Grace, e = duration("grace_ms", m.GraceMS, 1, lease.MaxTTL); e != nil {
		return out, e
	}
	if out.wait, e = duration("wait_timeout_ms", m.WaitTimeoutMS, 0, MaxWait); e != nil {
		return out, e
	}
	return out, nil
}

// decodeIntent reads one intent: the string form or the map form.
func decodeIntent(field string, raw json.RawMessage, agent string) (policy.Intent, *int64, *Error) {
	var (
		in  policy.Intent
		ts  *int64
		err error
	)
	b := bytes.TrimLeft(raw, " \t\r\n")
	switch {
	case len(b) > 0 && b[0] == '"':
		var s string
		if e := decodeStrict(raw, &s); e != nil {
			e.Field = join(field, e.Field)
			return in, nil, e
		}
		if in, err = policy.ParseIntent(s); err != nil {
			return in, nil, badField(field, "%v", err)
		}
	case len(b) > 0 && b[0] == '{':
		var w intentWire
		if e := decodeStrict(raw, &w); e != nil {
			e.Field = join(field, e.Field)
			return in, nil, e
		}
		p, err := policy.ParsePredicate(w.Predicate)
		if err != nil {
			return in, nil, badField(field+".predicate", "%v", err)
		}
		o, err := policy.ParseObject(w.Object)
		if err != nil {
			return in, nil, badField(field+".object", "%v", err)
		}
		if w.Subject != "" && w.Subject != agent {
			return in, nil, badField(field+".subject", "%q is not agent_id %q: a manifest's intents are its agent's (KLIS triples are subject-predicate-object)", w.Subject, agent)
		}
		switch w.Confidence {
		case "", "High", "Medium", "Low":
		default:
			return in, nil, badField(field+".confidence", "%q; want High, Medium or Low", w.Confidence)
		}
		in = policy.Intent{Predicate: p, Object: o, Subject: w.Subject, Confidence: w.Confidence, Reason: w.Reason}
		ts = w.Timestamp
	default:
		return in, nil, badField(field, "want an intent: a string \"PREDICATE TYPE:object\" or {subject, predicate, object}")
	}
	if (in.Object.Type == policy.ObjFile || in.Object.Type == policy.ObjProc) && strings.HasPrefix(in.Object.Path.Path, policy.WorkdirVar) {
		return in, nil, badField(field, "%s: ${workdir} means nothing to the lease API (there is no manifest file to expand it against): write the absolute path", in)
	}
	return in, ts, nil
}

// checkTimestamp reads a requester's age in ms since the epoch.
func checkTimestamp(field string, v int64, now time.Time) (time.Time, *Error) {
	t := time.UnixMilli(v)
	switch {
	case v <= 0:
		return t, badField(field, "%d; want the requester's first attempt in milliseconds since the Unix epoch", v)
	case t.After(now.Add(maxSkew)):
		return t, badField(field, "%s is in the future (klockd's clock says %s)", t.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	case t.Before(now.Add(-maxAgeBack)):
		return t, badField(field, "%s is more than %s ago: an age is the first attempt of one retry loop, not a priority to claim", t.UTC().Format(time.RFC3339), maxAgeBack)
	}
	return t, nil
}

// duration reads an optional millisecond field within [lo, hi] (a bound
// of 0 ms means absent is 0, the default).
func duration(field string, v *int64, lo int64, hi time.Duration) (time.Duration, *Error) {
	if v == nil {
		return 0, nil
	}
	if *v < lo || *v > hi.Milliseconds() {
		return 0, badField(field, "%d; want %d to %d (ms)", *v, lo, hi.Milliseconds())
	}
	return time.Duration(*v) * time.Millisecond, nil
}

// decodeTargets decodes a heartbeat, release or reconcile body. need says
// whether at least one target is required.
func decodeTargets(body []byte, need bool) (Targets, []lease.Holder, *Error) {
	var t Targets
	if e := decodeStrict(body, &t); e != nil {
		return t, nil, e
	}
	var hs []lease.Holder
	if t.AgentID != "" || t.SessionID != "" {
		if e := checkID("agent_id", t.AgentID); e != nil {
			return t, nil, e
		}
		if e := checkID("session_id", t.SessionID); e != nil {
			return t, nil, e
		}
		hs = append(hs, lease.Holder{Agent: t.AgentID, Session: t.SessionID})
	}
	if n := len(t.Sessions) + len(t.LeaseIDs); n > MaxItems {
		return t, nil, badField("", "%d targets; at most %d in one request", n, MaxItems)
	}
	for i, s := range t.Sessions {
		f := fmt.Sprintf("sessions[%d]", i)
		if e := checkID(f+".agent_id", s.AgentID); e != nil {
			return t, nil, e
		}
		if e := checkID(f+".session_id", s.SessionID); e != nil {
			return t, nil, e
		}
		hs = append(hs, lease.Holder{Agent: s.AgentID, Session: s.SessionID})
	}
	for i, id := range t.LeaseIDs {
		if e := checkID(fmt.Sprintf("lease_ids[%d]", i), id); e != nil {
			return t, nil, e
		}
	}
	if need && len(hs) == 0 && len(t.LeaseIDs) == 0 {
		return t, nil, badField("", "name a session (agent_id and session_id, or sessions) or lease_ids")
	}
	return t, hs, nil
}
