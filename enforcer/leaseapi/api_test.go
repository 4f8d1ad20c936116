//go:build linux

package leaseapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// A manifest is granted whole, listed, and released by lease id; KLIS's
// grant fields are there (lease_id, intent triple, expires_in_ms).
func TestGrantListRelease(t *testing.T) {
	ts := startServer(t, Config{})
	st, m := ts.call(t, "POST", "/v1/manifest", map[string]any{
		"agent_id": "coder", "session_id": "s1",
		"intents": []any{"MUTATES FILE:/repo/src/**",
			map[string]any{"subject": "coder", "predicate": "CONSUMES", "object": "FILE:/repo/docs/a.md", "confidence": "High"},
			"PROVIDES PROC:/usr/bin/sh"},
	})
	if st != http.StatusOK || m["outcome"] != "GRANTED" || m["success"] != true || m["ok"] != true {
		t.Fatalf("grant: %d %v", st, m)
	}
	ids := leaseIDs(t, m)
	if len(ids) != 2 {
		t.Fatalf("leases %v, want one per leased intent", m["leases"])
	}
	if e := num(get(m, "leases", 0, "expires_in_ms")); e < 59000 || e > 60000 {
		t.Fatalf("expires_in_ms %d, want the default TTL", e)
	}
	if get(m, "leases", 0, "intent", "subject") != "coder" || get(m, "leases", 0, "intent", "predicate") != "MUTATES" ||
		get(m, "leases", 0, "intent", "object") != "FILE:/repo/src/**" {
		t.Fatalf("intent triple: %v", get(m, "leases", 0, "intent"))
	}
	if get(m, "unleased", 0, "intent") != "PROVIDES PROC:/usr/bin/sh" || !strings.Contains(str(get(m, "unleased", 0, "why")), "not owning") {
		t.Fatalf("unleased: %v", m["unleased"])
	}
	if num(m["timestamp"]) == 0 {
		t.Fatal("no timestamp to retry with")
	}
	st, m = ts.call(t, "GET", "/v1/leases", nil)
	if st != 200 || len(m["leases"].([]any)) != 2 || get(m, "leases", 0, "session_id") != "s1" || get(m, "leases", 0, "tenant") == "" {
		t.Fatalf("list: %d %v", st, m)
	}
	st, m = ts.call(t, "POST", "/v1/leases/release", map[string]any{"lease_ids": ids[:1]})
	if st != 200 || num(m["released"]) != 1 {
		t.Fatalf("release: %d %v", st, m)
	}
	// Releasing it again: it is no active lease any more, and nothing of
	// the request is released (the other id stays).
	st, m = ts.call(t, "POST", "/v1/leases/release", map[string]any{"lease_ids": []string{ids[1], ids[0]}})
	if st != http.StatusNotFound || m["error_class"] != "not_found" || m["field"] != "lease_ids[1]" || m["ok"] != false {
		t.Fatalf("release twice: %d %v", st, m)
	}
	st, m = ts.call(t, "POST", "/v1/leases/release", map[string]any{"agent_id": "coder", "session_id": "s1"})
	if st != 200 || num(m["released"]) != 1 {
		t.Fatalf("release session: %d %v", st, m)
	}
	if _, m = ts.call(t, "GET", "/v1/leases", nil); len(m["leases"].([]any)) != 0 {
		t.Fatalf("after release: %v", m)
	}
}

// A younger requester dies against an older holder: 409 die naming the
// held lease, its holder and the requester's own intent that conflicts.
func TestDieYounger(t *testing.T) {
	ts := startServer(t, Config{})
	now := time.Now().UnixMilli()
	a := manifestBody("agent-a", "sa", "MUTATES FILE:/repo/src/**")
	a["timestamp"] = now - 1000
	st, m := ts.call(t, "POST", "/v1/manifest", a)
	if st != 200 {
		t.Fatalf("a: %d %v", st, m)
	}
	held := leaseIDs(t, m)[0]
	b := manifestBody("agent-b", "sb", "CONSUMES FILE:/repo/docs/**", "CONSUMES FILE:/repo/src/x.go")
	b["timestamp"] = now
	st, m = ts.call(t, "POST", "/v1/manifest", b)
	if st != http.StatusConflict || m["outcome"] != "DIE" || m["error_class"] != "die" || m["reason"] != "DIE" || m["retryable"] != true || m["success"] != false {
		t.Fatalf("b: %d %v", st, m)
	}
	if get(m, "conflicts", 0, "intent") != "CONSUMES FILE:/repo/src/x.go" || get(m, "conflicts", 0, "held", "lease_id") != held ||
		get(m, "conflicts", 0, "held", "agent_id") != "agent-a" || get(m, "conflicts", 0, "held", "session_id") != "sa" {
		t.Fatalf("conflicts: %v", m["conflicts"])
	}
	if msg := str(m["message"]); !strings.Contains(msg, held) || !strings.Contains(msg, "agent-a") || !strings.Contains(msg, "CONSUMES FILE:/repo/src/x.go") {
		t.Fatalf("message %q", msg)
	}
	if num(m["timestamp"]) != now || num(m["wait_time"]) <= 0 {
		t.Fatalf("timestamp %v wait_time %v", m["timestamp"], m["wait_time"])
	}
	// Nothing of b was granted (whole manifest).
	if _, m = ts.call(t, "GET", "/v1/leases?session=sb", nil); len(m["leases"].([]any)) != 0 {
		t.Fatalf("b holds %v", m["leases"])
	}
}

// An older requester waits: without wait_timeout_ms it is told WAIT at
// once; with it the request blocks, shows in /v1/contention as waiting,
// and is granted when the holder releases.
func TestWaitThenGrantedOnRelease(t *testing.T) {
	ts := startServer(t, Config{})
	st, m := ts.call(t, "POST", "/v1/manifest", manifestBody("young", "sy", "MUTATES FILE:/repo/**"))
	if st != 200 {
		t.Fatalf("holder: %d %v", st, m)
	}
	old := manifestBody("old", "so", "MUTATES FILE:/repo/src/a.go")
	old["timestamp"] = time.Now().Add(-time.Minute).UnixMilli()
	st, m = ts.call(t, "POST", "/v1/manifest", old)
	if st != http.StatusConflict || m["outcome"] != "WAIT" || m["error_class"] != "wait" || num(m["wait_time"]) <= 0 {
		t.Fatalf("older without wait: %d %v", st, m)
	}
	// A wait that runs out is answered WAIT after its timeout.
	old["wait_timeout_ms"] = 100
	st, m = ts.call(t, "POST", "/v1/manifest", old)
	if st != http.StatusConflict || m["outcome"] != "WAIT" || num(m["waited_ms"]) < 100 {
		t.Fatalf("older, wait runs out: %d %v", st, m)
	}

	old["wait_timeout_ms"] = 30000
	type answer struct {
		st int
		m  map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		st, m := callHTTP(t, unixHTTP(ts.socket), "POST", "/v1/manifest", old)
		done <- answer{st, m}
	}()
	waitFor(t, "the older request to wait", func() bool {
		_, c := ts.call(t, "GET", "/v1/contention", nil)
		return get(c, "waiting", 0, "requester", "session_id") == "so"
	})
	select {
	case a := <-done:
		t.Fatalf("answered before the holder released: %v", a)
	default:
	}
	if st, m := ts.call(t, "POST", "/v1/leases/release", map[string]any{"agent_id": "young", "session_id": "sy"}); st != 200 || num(m["released"]) != 1 {
		t.Fatalf("release: %d %v", st, m)
	}
	a := <-done
	if a.st != 200 || a.m["outcome"] != "GRANTED" || num(a.m["waited_ms"]) <= 0 || get(a.m, "leases", 0, "session_id") != "so" {
		t.Fatalf("waiter: %d %v", a.st, a.m)
	}
}

// Waiters are retried oldest first, one at a time: when the holder goes,
// the oldest is granted, and the younger ones then die against it (they
// are younger than the new holder) instead of racing it.
func TestWaitersOldestFirst(t *testing.T) {
	ts := startServer(t, Config{})
	if st, m := ts.call(t, "POST", "/v1/manifest", manifestBody("holder", "h", "MUTATES FILE:/repo/**")); st != 200 {
		t.Fatalf("holder: %d %v", st, m)
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	type answer struct {
		who string
		st  int
		m   map[string]any
	}
	done := make(chan answer, 3)
	// Start them youngest first: arrival order must not matter.
	for i, who := range []string{"w3", "w2", "w1"} {
		b := manifestBody(who, who, "MUTATES FILE:/repo/src/a.go")
		b["timestamp"], b["wait_timeout_ms"] = base+int64(2-i)*1000, 30000
		go func() {
			st, m := callHTTP(t, unixHTTP(ts.socket), "POST", "/v1/manifest", b)
			done <- answer{who, st, m}
		}()
		waitFor(t, who+" to wait", func() bool {
			_, c := ts.call(t, "GET", "/v1/contention", nil)
			return len(c["waiting"].([]any)) == i+1
		})
	}
	_, c := ts.call(t, "GET", "/v1/contention", nil)
	if get(c, "waiting", 0, "requester", "session_id") != "w1" || get(c, "waiting", 2, "requester", "session_id") != "w3" {
		t.Fatalf("waiting, oldest first: %v", c["waiting"])
	}
	ts.call(t, "POST", "/v1/leases/release", map[string]any{"agent_id": "holder", "session_id": "h"})
	got := map[string]string{}
	for range 3 {
		a := <-done
		got[a.who] = str(a.m["outcome"])
	}
	if got["w1"] != "GRANTED" || got["w2"] != "DIE" || got["w3"] != "DIE" {
		t.Fatalf("outcomes %v, want the oldest granted and the younger dying against it", got)
	}
}

// Heartbeats renew (bulk: a session and a lease id); a lease not renewed
// expires after TTL + grace (short ones, set in the request), frees its
// resource, and its heartbeat is then refused as gone.
func TestHeartbeatAndExpiry(t *testing.T) {
	ts := startServer(t, Config{})
	b := manifestBody("a", "s", "MUTATES FILE:/repo/x")
	b["ttl_ms"], b["grace_ms"] = 400, 50
	st, m := ts.call(t, "POST", "/v1/manifest", b)
	if st != 200 || num(get(m, "leases", 0, "ttl_ms")) != 400 || num(get(m, "leases", 0, "grace_ms")) != 50 {
		t.Fatalf("grant: %d %v", st, m)
	}
	id := leaseIDs(t, m)[0]
	time.Sleep(200 * time.Millisecond)
	st, m = ts.call(t, "POST", "/v1/leases/heartbeat", map[string]any{
		"sessions":  []any{map[string]any{"agent_id": "a", "session_id": "s"}, map[string]any{"agent_id": "a", "session_id": "nope"}},
		"lease_ids": []string{id, "l-0000000000000000"}})
	if st != 200 || len(m["results"].([]any)) != 4 {
		t.Fatalf("heartbeat: %d %v", st, m)
	}
	if get(m, "results", 0, "ok") != true || num(get(m, "results", 0, "expires_in_ms")) < 300 {
		t.Fatalf("session heartbeat: %v", get(m, "results", 0))
	}
	if get(m, "results", 1, "ok") != false || get(m, "results", 1, "error_class") != "gone" {
		t.Fatalf("unknown session: %v", get(m, "results", 1))
	}
	if get(m, "results", 2, "ok") != true || get(m, "results", 2, "lease_id") != id {
		t.Fatalf("lease id heartbeat: %v", get(m, "results", 2))
	}
	if get(m, "results", 3, "error_class") != "not_found" {
		t.Fatalf("unknown lease id: %v", get(m, "results", 3))
	}
	// Stop heartbeating: the lease is gone after TTL + grace.
	obj := "/v1/resource/" + url.PathEscape("FILE:/repo/**") + "/state"
	waitFor(t, "the lease to expire", func() bool {
		_, s := ts.call(t, "GET", obj, nil)
		return len(s["leases"].([]any)) == 0
	})
	st, m = ts.call(t, "POST", "/v1/leases/heartbeat", map[string]any{"agent_id": "a", "session_id": "s"})
	if st != 200 || get(m, "results", 0, "error_class") != "gone" {
		t.Fatalf("heartbeat after expiry: %d %v", st, m)
	}
	// The resource is free: anyone, younger or not, is granted.
	if st, m := ts.call(t, "POST", "/v1/manifest", manifestBody("b", "s2", "MUTATES FILE:/repo/x")); st != 200 {
		t.Fatalf("after expiry: %d %v", st, m)
	}
}

// Reconcile: of the ids a client believes it holds, which are active and
// which gone, and which it holds without listing them (in the session
// named, or in its whole tenant).
func TestReconcile(t *testing.T) {
	ts := startServer(t, Config{})
	_, m := ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s1", "MUTATES FILE:/r/a", "MUTATES FILE:/r/b"))
	ids := leaseIDs(t, m)
	_, m = ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s2", "MUTATES FILE:/r/c"))
	other := leaseIDs(t, m)[0]
	st, m := ts.call(t, "POST", "/v1/leases/reconcile", map[string]any{"agent_id": "a", "session_id": "s1", "lease_ids": []string{ids[0], "l-gone"}})
	if st != 200 || len(m["active"].([]any)) != 1 || get(m, "active", 0, "lease_id") != ids[0] ||
		len(m["gone"].([]any)) != 1 || get(m, "gone", 0) != "l-gone" ||
		len(m["unlisted"].([]any)) != 1 || get(m, "unlisted", 0, "lease_id") != ids[1] {
		t.Fatalf("reconcile in session: %d %v", st, m)
	}
	_, m = ts.call(t, "POST", "/v1/leases/reconcile", map[string]any{"lease_ids": []string{ids[0]}})
	var unlisted []string
	for _, l := range m["unlisted"].([]any) {
		unlisted = append(unlisted, l.(map[string]any)["lease_id"].(string))
	}
	if len(unlisted) != 2 || !(contains(unlisted, ids[1]) && contains(unlisted, other)) {
		t.Fatalf("reconcile in tenant: unlisted %v, want %s and %s", unlisted, ids[1], other)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A resource's state lists the leases overlapping it; the object is one
// URL-escaped segment, and a bad one is a located error.
func TestResourceState(t *testing.T) {
	ts := startServer(t, Config{})
	ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s1", "MUTATES FILE:/repo/src/**"))
	ts.call(t, "POST", "/v1/manifest", manifestBody("b", "s2", "CONSUMES FILE:/repo/docs/x", "PROVIDES NET:api.example.com:443/tcp"))
	for obj, want := range map[string]int{
		"FILE:/repo/**": 2, "FILE:/repo/src/a.go": 1, "FILE:/repo/docs/*": 1, "FILE:/elsewhere": 0,
		"NET:API.example.com:443": 1, "NET:api.example.com:80": 0,
	} {
		st, m := ts.call(t, "GET", "/v1/resource/"+url.PathEscape(obj)+"/state", nil)
		if st != 200 || len(m["leases"].([]any)) != want || num(m["hidden"]) != 0 {
			t.Errorf("%s: %d %v, want %d leases", obj, st, m, want)
		}
	}
	for _, obj := range []string{"PROC:/usr/bin/sh", "FILE:relative", "FILE:/proc/self"} {
		st, m := ts.call(t, "GET", "/v1/resource/"+url.PathEscape(obj)+"/state", nil)
		if st != 400 || m["error_class"] != "bad_request" || m["field"] != "object" {
			t.Errorf("%s: %d %v, want a bad_request at object", obj, st, m)
		}
	}
	// Unescaped slashes are not one segment: a typed 404 that says so.
	st, m := ts.call(t, "GET", "/v1/resource/FILE:/repo/state", nil)
	if st != 404 || m["error_class"] != "not_found" || !strings.Contains(str(m["message"]), "URL-escaped") {
		t.Fatalf("unescaped: %d %v", st, m)
	}
}

// Recent contention lists a DIE with its requester and conflicts.
func TestContention(t *testing.T) {
	ts := startServer(t, Config{})
	ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s1", "MUTATES FILE:/repo/**"))
	for range 3 { // the same contention again: one entry, counted
		ts.call(t, "POST", "/v1/manifest", manifestBody("b", "s2", "DELETES FILE:/repo/old"))
	}
	st, m := ts.call(t, "GET", "/v1/contention", nil)
	if st != 200 || len(m["recent"].([]any)) != 1 {
		t.Fatalf("contention: %d %v", st, m)
	}
	c := get(m, "recent", 0)
	if get(c, "requester", "session_id") != "s2" || get(c, "outcome") != "DIE" || num(get(c, "count")) != 3 ||
		get(c, "conflicts", 0, "intent") != "DELETES FILE:/repo/old" || get(c, "conflicts", 0, "held", "session_id") != "s1" {
		t.Fatalf("recent: %v", c)
	}
	if len(m["waiting"].([]any)) != 0 {
		t.Fatalf("waiting: %v", m["waiting"])
	}
}

// The event stream shows a grant and then its release, for the same
// lease, read with a plain HTTP client.
func TestEventsStream(t *testing.T) {
	ts := startServer(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://klockd/v1/events", nil)
	resp, err := unixHTTP(ts.socket).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan [2]string, 16) // event name, data
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var name, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && name != "":
				events <- [2]string{name, data}
				name, data = "", ""
			}
		}
		close(events)
	}()
	_, m := ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s1", "MUTATES FILE:/repo/x"))
	id := leaseIDs(t, m)[0]
	ts.call(t, "POST", "/v1/manifest", manifestBody("b", "s2", "MUTATES FILE:/repo/x"))
	ts.call(t, "POST", "/v1/leases/release", map[string]any{"lease_ids": []string{id}})
	var got []string
	for len(got) < 3 {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("stream ended after %v", got)
			}
			var ev Event
			if err := json.Unmarshal([]byte(e[1]), &ev); err != nil || ev.Type != e[0] {
				t.Fatalf("event %v: %v", e, err)
			}
			switch ev.Type {
			case "LeaseGranted", "LeaseFreed":
				if ev.Lease == nil || ev.Lease.LeaseID != id {
					t.Fatalf("%s of %+v, want %s", ev.Type, ev.Lease, id)
				}
				if ev.Type == "LeaseFreed" && ev.Lease.State != "Released" {
					t.Fatalf("freed lease state %s", ev.Lease.State)
				}
			case "ContentionDetected":
				if ev.Contention == nil || ev.Contention.Requester.SessionID != "s2" || ev.Contention.Outcome != "DIE" {
					t.Fatalf("contention %+v", ev.Contention)
				}
			}
			got = append(got, ev.Type)
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %v", got)
		}
	}
	if strings.Join(got, " ") != "LeaseGranted ContentionDetected LeaseFreed" {
		t.Fatalf("events %v", got)
	}
}

// Acquires over the tenant's limit are refused 429 with when to retry.
func TestRateLimit(t *testing.T) {
	ts := startServer(t, Config{Rate: 0.001, Burst: 2})
	for i := range 2 {
		if st, m := ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s", "CONSUMES FILE:/x")); st != 200 {
			t.Fatalf("acquire %d: %d %v", i, st, m)
		}
	}
	req, _ := http.NewRequest("POST", "http://klockd/v1/manifest", strings.NewReader(`{"agent_id":"a","session_id":"s","intents":["CONSUMES FILE:/x"]}`))
	resp, err := ts.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || e.Class != ClassRateLimited || !e.Retryable || e.RetryAfterMS <= 0 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third acquire: %d %+v Retry-After %q", resp.StatusCode, e, resp.Header.Get("Retry-After"))
	}
	// Heartbeats and reads are not acquires: still served.
	if st, _ := ts.call(t, "GET", "/v1/leases", nil); st != 200 {
		t.Fatalf("list while limited: %d", st)
	}
}

// Bad input over the socket: typed and located.
func TestBadRequestOverSocket(t *testing.T) {
	ts := startServer(t, Config{})
	st, m := ts.call(t, "POST", "/v1/manifest", `{"agent_id":"a","session_id":"s","intents":["MUTATES FILE:/x", {"predicate":"WRITES","object":"FILE:/y"}]}`)
	if st != 400 || m["error_class"] != "bad_request" || m["field"] != "intents[1].predicate" || m["ok"] != false || m["retryable"] != false {
		t.Fatalf("%d %v", st, m)
	}
	st, m = ts.call(t, "GET", "/v1/manifest", nil)
	if st != 405 || m["error_class"] != "method_not_allowed" {
		t.Fatalf("GET manifest: %d %v", st, m)
	}
	st, m = ts.call(t, "GET", "/v2/nothing", nil)
	if st != 404 || m["error_class"] != "not_found" {
		t.Fatalf("unknown path: %d %v", st, m)
	}
	big := `{"agent_id":"a","session_id":"s","intents":["` + strings.Repeat("x", MaxBody) + `"]}`
	st, m = ts.call(t, "POST", "/v1/manifest", big)
	if st != 413 || m["error_class"] != "too_large" {
		t.Fatalf("large body: %d %v", st, m)
	}
}

// Shutdown answers a waiting acquire (shutting_down) and ends event
// streams, and does not hang on them.
func TestShutdownEndsWaitsAndStreams(t *testing.T) {
	ts := startServer(t, Config{})
	ts.call(t, "POST", "/v1/manifest", manifestBody("a", "s1", "MUTATES FILE:/x"))
	old := manifestBody("b", "s2", "MUTATES FILE:/x")
	old["timestamp"], old["wait_timeout_ms"] = time.Now().Add(-time.Minute).UnixMilli(), 60000
	var wg sync.WaitGroup
	wg.Add(2)
	var waitSt int
	var waitM map[string]any
	go func() {
		defer wg.Done()
		waitSt, waitM = callHTTP(t, unixHTTP(ts.socket), "POST", "/v1/manifest", old)
	}()
	cl := Dial(ts.socket)
	stream, err := cl.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var streamErr error
	go func() {
		defer wg.Done()
		for {
			if _, streamErr = stream.Next(); streamErr != nil {
				return
			}
		}
	}()
	waitFor(t, "the request to wait", func() bool {
		_, c := ts.call(t, "GET", "/v1/contention", nil)
		return len(c["waiting"].([]any)) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if waitSt != http.StatusServiceUnavailable || waitM["error_class"] != "shutting_down" {
		t.Fatalf("waiting request: %d %v", waitSt, waitM)
	}
	if streamErr == nil {
		t.Fatal("stream did not end")
	}
}

// waitFor polls cond until it holds (10 s at most).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
