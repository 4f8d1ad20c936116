package lease

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleRecords are records of every shape the hand encoder writes, and
// some it must leave to encoding/json.
func sampleRecords() []record {
	at := time.Date(2026, 11, 29, 1, 2, 3, 456789000, time.UTC)
	local := time.Date(2026, 11, 29, 3, 2, 3, 0, time.FixedZone("x", 2*3600))
	h := Holder{Tenant: "uid:0", Agent: "coder", Session: "20261129T010203-abcdef"}
	grouped := Holder{Agent: "gw", Session: "s", Group: "run:1", Lead: true}
	claims := []Claim{mustClaim("MUTATES FILE:/srv/repo/src/**"), mustClaim("CONSUMES NET:api.example.com:443/tcp"),
		mustClaim("PROVIDES FILE:/srv/repo/new.go"), {Predicate: mustClaim("CONSUMES FILE:/a").Predicate, Resource: mustClaim("CONSUMES FILE:/a").Resource}}
	g := &wireGrant{First: "l-0123456789abcdef", Holder: h, Age: at, Acquired: at, ExpiresAt: local, TTL: time.Minute, Grace: 15 * time.Second,
		Claims: claims, Gone: []int{1, 3}}
	odd := *g
	odd.Claims = []Claim{mustClaim(`MUTATES FILE:/srv/rép<o>/"x"/**`)}
	empty := *g
	empty.Claims, empty.Gone = nil, nil
	return []record{
		{Op: opGrant, At: at, Grants: []*wireGrant{g}},
		{Op: opGrant, At: at, Grants: []*wireGrant{g, &empty}, Waiter: "w-1"},
		{Op: opGrant, At: at, Grants: []*wireGrant{&odd}},
		{Op: opGrant, At: at},
		{Op: opEnd, At: at, IDs: []string{"l-1", "l-2"}, State: Released},
		{Op: opEnd, At: at, IDs: []string{"l-1"}},
		{Op: opEnd, At: local, State: Expired},
		{Op: opBeat, At: at, Holder: &h},
		{Op: opBeat, At: at, Holder: &grouped},
		{Op: opBeat, At: at, Holder: &Holder{Agent: "a\tb", Session: "s"}},
		{Op: opUnwait, At: at, Waiter: "w-2", Why: "die"},
		{Op: opEnded, At: at, Leases: []Lease{{ID: "l-9", Holder: h, Predicate: claims[0].Predicate, Object: "FILE:/x", State: Released, EndedAt: at}}},
		{Op: opEnded, At: local, Leases: []Lease{
			{ID: "l-8", Holder: grouped, Predicate: claims[1].Predicate, Object: "NET:api.example.com:443/tcp", Intent: "CONSUMES NET:api.example.com:443/tcp",
				Age: at, AcquiredAt: at, ExpiresAt: local, TTL: time.Minute, Grace: time.Second, State: Expired, EndedAt: local, Host: "h1", Fence: 42},
			{ID: "l-7", Holder: h, Predicate: claims[2].Predicate, Object: "FILE:/srv/repo/new.go", State: Revoked, EndedAt: at}}},
		{Op: opEnded, At: at, Leases: []Lease{{ID: "l-6", Holder: h, Object: `FILE:/r<é>`, State: Released, EndedAt: at}}},
		{Op: opEnded, At: at},
	}
}

// TestRecordEncoderWritesWhatEncodingJSONWrites: every journal line the
// hand encoder writes is byte for byte the line encoding/json writes, and
// the records it leaves alone are written by encoding/json.
func TestRecordEncoderWritesWhatEncodingJSONWrites(t *testing.T) {
	hand := 0
	for i, r := range sampleRecords() {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeRecord(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want)+"\n" {
			t.Errorf("record %d (%s):\n got %s\nwant %s", i, r.Op, got, want)
		}
		if _, ok := appendRecord(nil, &r); ok {
			hand++
		}
	}
	if hand != 11 {
		t.Errorf("%d records written by hand, want 11 (grant, end, beat, ended without escaping)", hand)
	}
}

// TestRecordEncoderKnowsEveryField fails when a field is added to a
// struct the hand encoder writes: the encoder must learn it (and the
// expected lists here with it), or it would drop it from the journal.
func TestRecordEncoderKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{record{}, "op at grants leases holder ids state queued waiter why gen format size lines"},
		{wireGrant{}, "first holder age acquired_at expires_at ttl grace claims gone"},
		{Holder{}, "tenant agent session group lead"},
		{claimJSON{}, "predicate object intent"},
		{Lease{}, "id holder predicate object intent age acquired_at expires_at ttl grace state ended_at host fence"},
	} {
		var names []string
		rt := reflect.TypeOf(c.v)
		for i := range rt.NumField() {
			if tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
				names = append(names, tag)
			}
		}
		if !slices.Equal(names, strings.Fields(c.want)) {
			t.Errorf("%s's JSON fields are %q; the hand encoder (encode.go) writes %q: teach it the change", rt.Name(), names, c.want)
		}
	}
}

// FuzzRecordEncoder: for any holder, claim and id text, the hand encoder
// writes what encoding/json writes, or leaves the record to it.
func FuzzRecordEncoder(f *testing.F) {
	f.Add("coder", "s-1", "/srv/repo/src/**", "l-1")
	f.Add("a\"b", "s\u00e9", "/x<y>", "l-\n")
	f.Fuzz(func(t *testing.T, agent, session, path, id string) {
		c := mustClaim("MUTATES FILE:/x")
		if r, err := ParseResource("FILE:" + path); err == nil {
			c.Resource = r
		}
		h := Holder{Agent: agent, Session: session}
		at := time.Unix(1700000000, 123)
		for _, r := range []record{
			{Op: opGrant, At: at, Grants: []*wireGrant{{First: id, Holder: h, Claims: []Claim{c}}}},
			{Op: opEnd, At: at, IDs: []string{id}, State: Revoked},
			{Op: opBeat, At: at, Holder: &h},
		} {
			want, err := json.Marshal(&r)
			if err != nil {
				return
			}
			got, err := encodeRecord(nil, &r)
			if err != nil || string(got) != string(want)+"\n" {
				t.Fatalf("got %s (%v)\nwant %s", got, err, want)
			}
		}
	})
}

// TestJournalLinesDecodeAsRecords: a journal line decodes (decodeLine)
// to the record encoding/json makes of it, for every record shape; and a
// line naming an object that is not one fails both ways.
func TestJournalLinesDecodeAsRecords(t *testing.T) {
	samples := sampleRecords()
	h := Holder{Agent: "a", Session: "s"}
	samples = append(samples, record{Op: opWait, At: time.Unix(5, 0).UTC(), Queued: &waiter{ID: "w-1", Holder: h,
		Claims: []Claim{mustClaim("MUTATES FILE:/srv/x/**")}, Age: time.Unix(1, 0).UTC(), TTL: time.Minute, Since: time.Unix(2, 0).UTC(), Until: time.Unix(3, 0).UTC()}})
	for i, r := range samples {
		line, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		var want, got record
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatal(err)
		}
		if err := decodeLine(line, &got); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d (%s):\n got %+v\nwant %+v", i, r.Op, got, want)
		}
	}
	bad := []byte(`{"op":"grant","at":"2026-11-29T00:00:00Z","grants":[{"first":"l-1","holder":{"agent":"a","session":"s"},"claims":[{"predicate":"MUTATES","object":"DISK:/x"}]}]}`)
	var r record
	if json.Unmarshal(bad, &r) == nil || decodeLine(bad, &r) == nil {
		t.Error("an object of no known type decoded")
	}
}

// TestGrantEncoderWritesTheWireForm: a grant the table holds is written
// (appendGrant, from the grant itself) as its wire form is (the form the
// journal decodes), with the leases it no longer holds listed as gone.
func TestGrantEncoderWritesTheWireForm(t *testing.T) {
	tb := NewTable()
	h := Holder{Tenant: "uid:0", Agent: "coder", Session: "s", Group: "run:1", Lead: true}
	d, err := tb.Acquire(context.Background(), Request{Holder: h, Claims: []Claim{mustClaim("MUTATES FILE:/srv/repo/src/**"),
		mustClaim("CONSUMES NET:api.example.com:443/tcp"), mustClaim("PROVIDES FILE:/srv/repo/new.go"), mustClaim("CONSUMES NET:10.0.0.0/8:1-99/udp")}})
	if err != nil || d.Outcome != Granted {
		t.Fatal(d.Outcome, err)
	}
	if n, err := tb.Release(context.Background(), h, d.LeaseID(1), d.LeaseID(3)); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	if len(tb.byGrant) != 1 {
		t.Fatalf("%d grants", len(tb.byGrant))
	}
	for _, g := range tb.byGrant {
		got, ok := appendGrant(nil, g)
		want, _ := appendWireGrant(nil, g.wire())
		if !ok || string(got) != string(want) {
			t.Errorf("got  %s (%v)\nwant %s", got, ok, want)
		}
		if !strings.Contains(string(got), `"gone":[1,3]`) {
			t.Errorf("the released leases are not gone: %s", got)
		}
	}
}
