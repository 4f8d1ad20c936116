package leaseapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// Every refusal of a manifest names the field at fault.
func TestDecodeManifestLocatesErrors(t *testing.T) {
	now := time.Now()
	ts := func(d time.Duration) string { return fmt.Sprint(now.Add(d).UnixMilli()) }
	for body, field := range map[string]string{
		`{"session_id":"s","intents":["MUTATES FILE:/x"]}`:                                                                           "agent_id",
		`{"agent_id":"a","intents":["MUTATES FILE:/x"]}`:                                                                             "session_id",
		`{"agent_id":"a","session_id":"l-123","intents":["MUTATES FILE:/x"]}`:                                                        "session_id",
		`{"agent_id":"a\u0007","session_id":"s","intents":["MUTATES FILE:/x"]}`:                                                      "agent_id",
		`{"agent_id":"a","session_id":"s"}`:                                                                                          "intents",
		`{"agent_id":"a","session_id":"s","intents":[]}`:                                                                             "intents",
		`{"agent_id":"a","session_id":"s","intents":"MUTATES FILE:/x"}`:                                                              "intents",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"tenant":"uid:0"}`:                                           "tenant",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x", "WRITES FILE:/y"]}`:                                          "intents[1]",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x", 7]}`:                                                         "intents[1]",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:relative"]}`:                                                      "intents[0]",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:${workdir}/src/**"]}`:                                             "intents[0]",
		`{"agent_id":"a","session_id":"s","intents":[{"predicate":"MUTATES","object":"FILE:/x","x":1}]}`:                             "intents[0].x",
		`{"agent_id":"a","session_id":"s","intents":[{"predicate":"MUTATE","object":"FILE:/x"}]}`:                                    "intents[0].predicate",
		`{"agent_id":"a","session_id":"s","intents":[{"predicate":"MUTATES","object":"DB:/x"}]}`:                                     "intents[0].object",
		`{"agent_id":"a","session_id":"s","intents":[{"subject":"b","predicate":"MUTATES","object":"FILE:/x"}]}`:                     "intents[0].subject",
		`{"agent_id":"a","session_id":"s","intents":[{"predicate":"MUTATES","object":"FILE:/x","confidence":"Sure"}]}`:               "intents[0].confidence",
		`{"agent_id":"a","session_id":"s","intents":[{"predicate":"MUTATES","object":"FILE:/x","timestamp":"1"}]}`:                   "intents[0].timestamp",
		`{"agent_id":"a","session_id":"s","intents":[{"predicate":"MUTATES","object":"FILE:/x","timestamp":` + ts(time.Hour) + `}]}`: "intents[0].timestamp",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"timestamp":` + ts(-48*time.Hour) + `}`:                      "timestamp",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"timestamp":0}`:                                              "timestamp",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"ttl_ms":0}`:                                                 "ttl_ms",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"ttl_ms":300001}`:                                            "ttl_ms",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"grace_ms":-1}`:                                              "grace_ms",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"wait_timeout_ms":-1}`:                                       "wait_timeout_ms",
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x"],"wait_timeout_ms":1.5}`:                                      "wait_timeout_ms",
	} {
		_, e := decodeManifest([]byte(body), now)
		if e == nil {
			t.Errorf("%s: accepted", body)
			continue
		}
		if e.Class != ClassBadRequest || e.Field != field || e.Message == "" {
			t.Errorf("%s: %+v, want a bad_request at %s", body, e, field)
		}
	}
	for _, body := range []string{``, `{`, `[]`, `{"agent_id":"a"} {}`, `nul`} {
		if _, e := decodeManifest([]byte(body), now); e == nil || e.Class != ClassBadRequest {
			t.Errorf("%q: %+v", body, e)
		}
	}
}

// Both intent forms, the earliest timestamp as the age, and the lease
// parameters are read.
func TestDecodeManifest(t *testing.T) {
	now := time.Now()
	t1, t2 := now.Add(-2*time.Second).UnixMilli(), now.Add(-time.Second).UnixMilli()
	body := fmt.Sprintf(`{"agent_id":"a","session_id":"s","timestamp":%d,"ttl_ms":1500,"grace_ms":10,"wait_timeout_ms":2000,
		"intents":["MUTATES FILE:/r/**",{"subject":"a","predicate":"CONSUMES","object":"NET:h:443/tcp","confidence":"Low","timestamp":%d},"CONSUMES FILE:/proc/self/status"]}`, t2, t1)
	mr, e := decodeManifest([]byte(body), now)
	if e != nil {
		t.Fatal(e)
	}
	if mr.req.Holder != (lease.Holder{Agent: "a", Session: "s"}) || len(mr.req.Claims) != 2 || len(mr.unleased) != 1 ||
		mr.req.Age.UnixMilli() != t1 || mr.req.TTL != 1500*time.Millisecond || mr.req.Grace != 10*time.Millisecond || mr.wait != 2*time.Second {
		t.Fatalf("%+v", mr)
	}
	if mr.req.Claims[1].Intent != "CONSUMES NET:h:443/tcp" || !strings.Contains(mr.unleased[0].Why, "/proc") {
		t.Fatalf("claims %+v unleased %+v", mr.req.Claims, mr.unleased)
	}
}

func TestDecodeTargets(t *testing.T) {
	_, hs, e := decodeTargets([]byte(`{"agent_id":"a","session_id":"s","sessions":[{"agent_id":"b","session_id":"t"}],"lease_ids":["l-1"]}`), true)
	if e != nil || len(hs) != 2 || hs[1].Session != "t" {
		t.Fatalf("%v %v", hs, e)
	}
	for body, field := range map[string]string{
		`{}`:                              "",
		`{"sessions":[{"agent_id":"b"}]}`: "sessions[0].session_id",
		`{"lease_ids":["l-1",""]}`:        "lease_ids[1]",
		`{"agent_id":"a"}`:                "session_id",
		`{"lease_ids":"l-1"}`:             "lease_ids",
	} {
		_, _, e := decodeTargets([]byte(body), true)
		if e == nil || e.Field != field || e.Class != ClassBadRequest {
			t.Errorf("%s: %+v, want a bad_request at %q", body, e, field)
		}
	}
	if _, _, e := decodeTargets([]byte(`{}`), false); e != nil {
		t.Errorf("reconcile of nothing: %v", e)
	}
}

// FuzzDecode: the request decoders never panic, refuse with a typed
// bad_request (or too_large) that says something, and what they accept is
// a request the store can decide: a holder, claims on leased resources,
// bounded parameters, one entry per intent.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/r/**"]}`,
		`{"agent_id":"a","session_id":"s","intents":[{"subject":"a","predicate":"CONSUMES","object":"NET:10.0.0.0/8:1-1024/udp","timestamp":1700000000000}],"ttl_ms":5}`,
		`{"agent_id":"a","session_id":"s","intents":["PROVIDES PROC:/usr/bin/sh","DELETES FILE:/x/*"],"wait_timeout_ms":10}`,
		`{"sessions":[{"agent_id":"a","session_id":"s"}],"lease_ids":["l-1"]}`,
		`{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/r/**"]}{}`,
		`{"intents":[{"predicate":"MUTATES","object":"FILE:/x","extra":{}}]}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, body []byte) {
		mr, e := decodeManifest(body, now)
		if e != nil {
			if e.Class != ClassBadRequest || e.Message == "" {
				t.Fatalf("refusal %+v", e)
			}
		} else {
			var raw struct {
				Intents []json.RawMessage `json:"intents"`
			}
			_ = json.Unmarshal(body, &raw)
			h := mr.req.Holder
			if h.Agent == "" || h.Session == "" || h.Tenant != "" || len(mr.req.Claims)+len(mr.unleased) != len(raw.Intents) {
				t.Fatalf("accepted %+v from %q", mr, body)
			}
			for _, c := range mr.req.Claims {
				if _, err := lease.ParseResource(c.Resource.String()); err != nil {
					t.Fatalf("claim on %s: %v", c.Resource, err)
				}
			}
			if mr.req.TTL < 0 || mr.req.TTL > lease.MaxTTL || mr.wait < 0 || mr.wait > MaxWait || mr.req.Age.After(now.Add(maxSkew)) {
				t.Fatalf("bounds %+v", mr)
			}
		}
		if _, hs, e := decodeTargets(body, true); e == nil {
			for _, h := range hs {
				if h.Agent == "" || h.Session == "" {
					t.Fatalf("holder %+v from %q", h, body)
				}
			}
		} else if e.Class != ClassBadRequest {
			t.Fatalf("targets refusal %+v", e)
		}
	})
}
