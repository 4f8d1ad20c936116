package lease

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/klocklabs/klock/policy"
)

// The journal's hot records (grant, end, beat: one or two a lease
// operation; ended: a compaction's thousands of ended leases) are written
// by appendRecord, by hand, without reflection: the
// same JSON encoding/json writes for them (the decoder reads both), at a
// fraction of its cost (a Claim's MarshalJSON and every time.Time went
// through encoding/json's marshaler path, which re-validates each value).
// Every other record, and any record carrying a string that needs
// escaping, goes through encoding/json. TestRecordEncoderKnowsEveryField
// fails when a field is added to the structs written here.

// appendRecord appends r's journal line (with its newline) to dst; ok is
// false when r is not one of the records written by hand.
func appendRecord(dst []byte, r *record) (out []byte, ok bool) {
	start := len(dst)
	switch {
	case r.Op == opGrant && r.Holder == nil && len(r.IDs) == 0:
		dst = append(dst, `{"op":"grant","at":`...)
		dst = appendTime(dst, r.At)
		// Grants as read, or the grants made here, written from them.
		if n := max(len(r.Grants), len(r.grants)); n > 0 {
			dst = append(dst, `,"grants":[`...)
			for i := range n {
				if i > 0 {
					dst = append(dst, ',')
				}
				if len(r.Grants) > 0 {
					dst, ok = appendWireGrant(dst, r.Grants[i])
				} else {
					dst, ok = appendGrant(dst, r.grants[i])
				}
				if !ok {
					return dst[:start], false
				}
			}
			dst = append(dst, ']')
		}
	case r.Op == opEnd && r.Holder == nil && len(r.Grants) == 0:
		dst = append(dst, `{"op":"end","at":`...)
		dst = appendTime(dst, r.At)
		if len(r.IDs) > 0 {
			dst = append(dst, `,"ids":[`...)
			for i, id := range r.IDs {
				if i > 0 {
					dst = append(dst, ',')
				}
				if dst, ok = appendString(dst, id); !ok {
					return dst[:start], false
				}
			}
			dst = append(dst, ']')
		}
		if r.State != Active {
			dst = append(dst, `,"state":`...)
			dst = strconv.AppendQuote(dst, r.State.String())
		}
	case r.Op == opBeat && r.Holder != nil && len(r.Grants) == 0 && len(r.IDs) == 0:
		dst = append(dst, `{"op":"beat","at":`...)
		dst = appendTime(dst, r.At)
		dst = append(dst, `,"holder":`...)
		if dst, ok = appendHolder(dst, r.Holder); !ok {
			return dst[:start], false
		}
	case r.Op == opEnded && r.Holder == nil && len(r.Grants) == 0 && len(r.IDs) == 0:
		dst = append(dst, `{"op":"ended","at":`...)
		dst = appendTime(dst, r.At)
		if len(r.Leases) > 0 {
			dst = append(dst, `,"leases":[`...)
			for i := range r.Leases {
				if i > 0 {
					dst = append(dst, ',')
				}
				if dst, ok = appendLease(dst, &r.Leases[i]); !ok {
					return dst[:start], false
				}
			}
			dst = append(dst, ']')
		}
	default:
		return dst, false
	}
	if r.State != Active && r.Op != opEnd || r.Queued != nil || r.Leases != nil && r.Op != opEnded || r.Why != "" || r.Gen != 0 || r.Format != 0 || r.Size != 0 || r.Lines != 0 {
		return dst[:start], false
	}
	if r.Waiter != "" {
		dst = append(dst, `,"waiter":`...)
		if dst, ok = appendString(dst, r.Waiter); !ok {
			return dst[:start], false
		}
	}
	return append(dst, '}', '\n'), true
}

func appendWireGrant(dst []byte, g *wireGrant) ([]byte, bool) {
	ok := true
	dst = append(dst, `{"first":`...)
	if dst, ok = appendString(dst, g.First); !ok {
		return dst, false
	}
	if dst, ok = appendShared(dst, &g.Holder, g.Age, g.Acquired, g.ExpiresAt, g.TTL, g.Grace); !ok {
		return dst, false
	}
	dst = append(dst, `,"claims":`...)
	if g.Claims == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range g.Claims {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, ok = appendClaim(dst, &g.Claims[i]); !ok {
				return dst, false
			}
		}
		dst = append(dst, ']')
	}
	if len(g.Gone) > 0 {
		dst = append(dst, `,"gone":[`...)
		for i, n := range g.Gone {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), true
}

// appendGrant appends what appendWireGrant appends of g.wire(), without
// making it: the objects are the entries' own, rendered once.
func appendGrant(dst []byte, g *grant) ([]byte, bool) {
	ok := true
	dst = append(dst, `{"first":`...)
	dst = append(dst, '"')
	dst = appendID(dst, g.base)
	dst = append(dst, '"')
	if dst, ok = appendShared(dst, &g.holder, g.age, g.acquiredAt, g.expiresAt, g.ttl, g.grace); !ok {
		return dst, false
	}
	dst = append(dst, `,"claims":[`...)
	gone := false
	for i := range g.entries {
		e := &g.entries[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, ok = appendClaimOf(dst, e.predicate, e.object, e.intent); !ok {
			return dst, false
		}
		gone = gone || !e.live
	}
	dst = append(dst, ']')
	if gone {
		dst = append(dst, `,"gone":[`...)
		first := true
		for i := range g.entries {
			if !g.entries[i].live {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = strconv.AppendInt(dst, int64(i), 10)
			}
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), true
}

// appendShared appends what the leases of a grant share, after its
// first ID.
func appendShared(dst []byte, h *Holder, age, acquired, expires time.Time, ttl, grace time.Duration) ([]byte, bool) {
	ok := true
	dst = append(dst, `,"holder":`...)
	if dst, ok = appendHolder(dst, h); !ok {
		return dst, false
	}
	dst = append(dst, `,"age":`...)
	dst = appendTime(dst, age)
	dst = append(dst, `,"acquired_at":`...)
	dst = appendTime(dst, acquired)
	dst = append(dst, `,"expires_at":`...)
	dst = appendTime(dst, expires)
	dst = append(dst, `,"ttl":`...)
	dst = strconv.AppendInt(dst, int64(ttl), 10)
	dst = append(dst, `,"grace":`...)
	dst = strconv.AppendInt(dst, int64(grace), 10)
	return dst, true
}

func appendClaim(dst []byte, c *Claim) ([]byte, bool) {
	return appendClaimOf(dst, c.Predicate, c.Resource.String(), c.Intent)
}

func appendClaimOf(dst []byte, p policy.Predicate, object, intent string) ([]byte, bool) {
	dst, ok := appendIntent(append(dst, '{'), p, object, intent)
	return append(dst, '}'), ok
}

// appendIntent appends the predicate, object and intent fields of a
// claim or a lease.
func appendIntent(dst []byte, p policy.Predicate, object, intent string) ([]byte, bool) {
	ok := true
	dst = append(dst, `"predicate":`...)
	if dst, ok = appendString(dst, p.String()); !ok {
		return dst, false
	}
	dst = append(dst, `,"object":`...)
	if dst, ok = appendString(dst, object); !ok {
		return dst, false
	}
	if intent != "" {
		dst = append(dst, `,"intent":`...)
		if dst, ok = appendString(dst, intent); !ok {
			return dst, false
		}
	}
	return dst, true
}

func appendLease(dst []byte, l *Lease) ([]byte, bool) {
	ok := true
	dst = append(dst, `{"id":`...)
	if dst, ok = appendString(dst, l.ID); !ok {
		return dst, false
	}
	dst = append(dst, `,"holder":`...)
	if dst, ok = appendHolder(dst, &l.Holder); !ok {
		return dst, false
	}
	dst = append(dst, ',')
	if dst, ok = appendIntent(dst, l.Predicate, l.Object, l.Intent); !ok {
		return dst, false
	}
	dst = append(dst, `,"age":`...)
	dst = appendTime(dst, l.Age)
	dst = append(dst, `,"acquired_at":`...)
	dst = appendTime(dst, l.AcquiredAt)
	dst = append(dst, `,"expires_at":`...)
	dst = appendTime(dst, l.ExpiresAt)
	dst = append(dst, `,"ttl":`...)
	dst = strconv.AppendInt(dst, int64(l.TTL), 10)
	dst = append(dst, `,"grace":`...)
	dst = strconv.AppendInt(dst, int64(l.Grace), 10)
	dst = append(dst, `,"state":`...)
	dst = strconv.AppendQuote(dst, l.State.String())
	dst = append(dst, `,"ended_at":`...)
	dst = appendTime(dst, l.EndedAt)
	if l.Host != "" {
		dst = append(dst, `,"host":`...)
		if dst, ok = appendString(dst, l.Host); !ok {
			return dst, false
		}
	}
	if l.Fence != 0 {
		dst = append(dst, `,"fence":`...)
		dst = strconv.AppendInt(dst, l.Fence, 10)
	}
	return append(dst, '}'), true
}

func appendHolder(dst []byte, h *Holder) ([]byte, bool) {
	ok := true
	dst = append(dst, '{')
	if h.Tenant != "" {
		dst = append(dst, `"tenant":`...)
		if dst, ok = appendString(dst, h.Tenant); !ok {
			return dst, false
		}
		dst = append(dst, ',')
	}
	dst = append(dst, `"agent":`...)
	if dst, ok = appendString(dst, h.Agent); !ok {
		return dst, false
	}
	dst = append(dst, `,"session":`...)
	if dst, ok = appendString(dst, h.Session); !ok {
		return dst, false
	}
	if h.Group != "" {
		dst = append(dst, `,"group":`...)
		if dst, ok = appendString(dst, h.Group); !ok {
			return dst, false
		}
	}
	if h.Lead {
		dst = append(dst, `,"lead":true`...)
	}
	return append(dst, '}'), true
}

// appendString appends s as a JSON string when it needs no escaping
// (printable ASCII but the quote, the backslash and the HTML characters
// encoding/json escapes); false otherwise, for the caller to fall back.
func appendString(dst []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return dst, false
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), true
}

// appendTime appends t as encoding/json does (RFC 3339 with nanoseconds,
// quoted).
func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

// encodeRecord appends r's journal line to dst, by hand when it can and
// through encoding/json otherwise.
func encodeRecord(dst []byte, r *record) ([]byte, error) {
	if out, ok := appendRecord(dst, r); ok {
		return out, nil
	}
	if r.Op == opGrant && r.Grants == nil && r.grants != nil {
		w := *r // encoding/json writes the wire form
		for _, g := range r.grants {
			w.Grants = append(w.Grants, g.wire())
		}
		r = &w
	}
	b, err := json.Marshal(r)
	if err != nil {
		return dst, err
	}
	dst = append(dst, b...)
	return append(dst, '\n'), nil
}
