//go:build linux

package leaseapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/testutil"
)

// handlerServer is the API's handler alone, behind an httptest server
// whose callers say who they are in X-Test-Tenant (X-Test-Admin: 1): the
// identity a transport would have proved.
func handlerServer(t *testing.T) (*Server, *lease.Table, *httptest.Server) {
	t.Helper()
	tb := lease.NewTable()
	s, err := New(Config{Store: tb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := Identity{Tenant: r.Header.Get("X-Test-Tenant"), Admin: r.Header.Get("X-Test-Admin") == "1", Who: "test"}
		s.Handler().ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	})
	return s, tb, hs
}

// as sends one request as tenant (admin when the tenant is "admin").
func as(t *testing.T, hs *httptest.Server, tenant, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, hs.URL+path, rd)
	req.Header.Set("X-Test-Tenant", tenant)
	if tenant == "admin" {
		req.Header.Set("X-Test-Tenant", "uid:0")
		req.Header.Set("X-Test-Admin", "1")
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: %d: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, m
}

// Another tenant's leases are invisible, cannot be released, revoked or
// heartbeated (not_found, as if they did not exist), and show in a
// conflict only redacted; the admin sees and frees them.
func TestTenantIsolation(t *testing.T) {
	_, tb, hs := handlerServer(t)
	old := manifestBody("agent-a", "sess-a", "MUTATES FILE:/shared/src/**")
	old["timestamp"] = time.Now().Add(-time.Minute).UnixMilli()
	st, m := as(t, hs, "uid:1001", "POST", "/v1/manifest", old)
	if st != 200 {
		t.Fatalf("a: %d %v", st, m)
	}
	aID := leaseIDs(t, m)[0]

	// b conflicts and dies: the held lease is redacted.
	st, m = as(t, hs, "uid:1002", "POST", "/v1/manifest", manifestBody("agent-b", "sess-b", "CONSUMES FILE:/shared/src/x.go"))
	if st != 409 || m["outcome"] != "DIE" {
		t.Fatalf("b: %d %v", st, m)
	}
	held := get(m, "conflicts", 0, "held").(map[string]any)
	if held["redacted"] != true || held["predicate"] != "MUTATES" || held["lease_id"] != nil || held["agent_id"] != nil ||
		held["session_id"] != nil || held["object"] != nil || held["tenant"] != nil {
		t.Fatalf("b sees the held lease as %v", held)
	}
	if get(m, "conflicts", 0, "intent") != "CONSUMES FILE:/shared/src/x.go" {
		t.Fatalf("b's own intent: %v", m["conflicts"])
	}
	if msg := str(m["message"]); strings.Contains(msg, aID) || strings.Contains(msg, "agent-a") || strings.Contains(msg, "sess-a") {
		t.Fatalf("message names a's lease: %q", msg)
	}
	if b, _ := json.Marshal(m); strings.Contains(string(b), "uid:1001") {
		t.Fatalf("a's tenant in b's answer: %s", b)
	}

	// Invisible to b everywhere.
	if _, m := as(t, hs, "uid:1002", "GET", "/v1/leases", nil); len(m["leases"].([]any)) != 0 {
		t.Fatalf("b lists %v", m["leases"])
	}
	_, m = as(t, hs, "uid:1002", "GET", "/v1/resource/"+url.PathEscape("FILE:/shared/**")+"/state", nil)
	if len(m["leases"].([]any)) != 0 || num(m["hidden"]) != 1 {
		t.Fatalf("b's state: %v", m)
	}
	if st, m := as(t, hs, "uid:1002", "POST", "/v1/leases/release", map[string]any{"lease_ids": []string{aID}}); st != 404 || m["error_class"] != "not_found" {
		t.Fatalf("b releases a's lease: %d %v", st, m)
	}
	if st, m := as(t, hs, "uid:1002", "POST", "/v1/leases/release", map[string]any{"agent_id": "agent-a", "session_id": "sess-a"}); st != 200 || num(m["released"]) != 0 {
		t.Fatalf("b releases a's session by name: %d %v", st, m)
	}
	for _, id := range []string{aID, "sess-a"} {
		if st, m := as(t, hs, "uid:1002", "POST", "/v1/leases/revoke", map[string]any{"id": id}); st != 404 || m["error_class"] != "not_found" {
			t.Fatalf("b revokes %s: %d %v", id, st, m)
		}
	}
	if _, m := as(t, hs, "uid:1002", "POST", "/v1/leases/heartbeat", map[string]any{"lease_ids": []string{aID}}); get(m, "results", 0, "error_class") != "not_found" {
		t.Fatalf("b heartbeats a's lease: %v", m)
	}
	if _, m := as(t, hs, "uid:1002", "POST", "/v1/leases/reconcile", map[string]any{"lease_ids": []string{aID}}); get(m, "gone", 0) != aID {
		t.Fatalf("b reconciles a's lease: %v", m)
	}
	if st, m := as(t, hs, "uid:1002", "GET", "/v1/leases?tenant=uid:1001", nil); st != 403 || m["error_class"] != "forbidden" {
		t.Fatalf("b lists a's tenant: %d %v", st, m)
	}
	if ls, _ := tb.List(context.Background(), lease.Filter{}); len(ls) != 1 || ls[0].ID != aID {
		t.Fatalf("a's lease after b's attempts: %v", ls)
	}

	// Contention: b sees its own whole (held redacted); a sees that
	// someone met its lease, the requester redacted.
	_, m = as(t, hs, "uid:1002", "GET", "/v1/contention", nil)
	if get(m, "recent", 0, "requester", "session_id") != "sess-b" || get(m, "recent", 0, "conflicts", 0, "held", "redacted") != true {
		t.Fatalf("b's contention: %v", m["recent"])
	}
	_, m = as(t, hs, "uid:1001", "GET", "/v1/contention", nil)
	if get(m, "recent", 0, "requester", "redacted") != true || get(m, "recent", 0, "requester", "session_id") != nil ||
		get(m, "recent", 0, "conflicts", 0, "intent") != nil || get(m, "recent", 0, "conflicts", 0, "held", "lease_id") != aID {
		t.Fatalf("a's contention: %v", m["recent"])
	}
	// A third tenant sees nothing of it.
	if _, m := as(t, hs, "uid:1003", "GET", "/v1/contention", nil); len(m["recent"].([]any)) != 0 {
		t.Fatalf("c's contention: %v", m["recent"])
	}

	// The admin sees everything, holders included, and frees it.
	_, m = as(t, hs, "admin", "GET", "/v1/leases", nil)
	if len(m["leases"].([]any)) != 1 || get(m, "leases", 0, "tenant") != "uid:1001" {
		t.Fatalf("admin lists %v", m)
	}
	st, m = as(t, hs, "admin", "POST", "/v1/manifest", manifestBody("root-agent", "rs", "MUTATES FILE:/shared/src/y.go"))
	if st != 409 || get(m, "conflicts", 0, "held", "lease_id") != aID || get(m, "conflicts", 0, "held", "tenant") != "uid:1001" {
		t.Fatalf("admin's conflict: %d %v", st, m)
	}
	if st, m := as(t, hs, "admin", "POST", "/v1/leases/release", map[string]any{"lease_ids": []string{aID}}); st != 200 || num(m["released"]) != 1 {
		t.Fatalf("admin releases a's lease: %d %v", st, m)
	}
	ended, _ := tb.List(context.Background(), lease.Filter{EndedSince: time.Unix(1, 0)})
	if len(ended) != 1 || ended[0].State != lease.Revoked {
		t.Fatalf("a's lease after the admin freed it: %+v", ended)
	}
}

// A tenant revokes its own lease or session; the admin revokes anyone's.
func TestRevoke(t *testing.T) {
	_, _, hs := handlerServer(t)
	_, m := as(t, hs, "uid:1001", "POST", "/v1/manifest", manifestBody("a", "s1", "MUTATES FILE:/r/a", "MUTATES FILE:/r/b"))
	ids := leaseIDs(t, m)
	if st, m := as(t, hs, "uid:1001", "POST", "/v1/leases/revoke", map[string]any{"id": ids[0]}); st != 200 || num(m["revoked"]) != 1 {
		t.Fatalf("own lease: %d %v", st, m)
	}
	if st, m := as(t, hs, "uid:1001", "POST", "/v1/leases/revoke", map[string]any{"id": "s1"}); st != 200 || num(m["revoked"]) != 1 {
		t.Fatalf("own session: %d %v", st, m)
	}
	as(t, hs, "uid:1002", "POST", "/v1/manifest", manifestBody("b", "s2", "MUTATES FILE:/r/c"))
	if st, m := as(t, hs, "admin", "POST", "/v1/leases/revoke", map[string]any{"id": "s2"}); st != 200 || num(m["revoked"]) != 1 {
		t.Fatalf("admin revokes b's session: %d %v", st, m)
	}
	if st, m := as(t, hs, "admin", "POST", "/v1/leases/revoke", map[string]any{"id": "s2"}); st != 404 || m["field"] != "id" {
		t.Fatalf("revoke of nothing: %d %v", st, m)
	}
}

// A tenant's event stream carries its own grants and frees only.
func TestEventsPerTenant(t *testing.T) {
	_, _, hs := handlerServer(t)
	req, _ := http.NewRequest("GET", hs.URL+"/v1/events", nil)
	req.Header.Set("X-Test-Tenant", "uid:1002")
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				lines <- strings.TrimPrefix(l, "data: ")
			}
		}
		close(lines)
	}()
	_, m := as(t, hs, "uid:1001", "POST", "/v1/manifest", manifestBody("a", "sa", "MUTATES FILE:/x/**"))
	as(t, hs, "uid:1001", "POST", "/v1/leases/release", map[string]any{"lease_ids": leaseIDs(t, m)})
	_, m = as(t, hs, "uid:1002", "POST", "/v1/manifest", manifestBody("b", "sb", "MUTATES FILE:/y"))
	mine := leaseIDs(t, m)[0]
	select {
	case l := <-lines:
		var ev Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Type != "LeaseGranted" || ev.Lease == nil || ev.Lease.LeaseID != mine {
			t.Fatalf("first event b sees: %s (%v), want the grant of its own %s", l, err, mine)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

// Over the real socket, as root and as uids of the klock group (nogroup
// here): each uid is its own tenant, root is the admin, and a uid outside
// the group is refused by the server even when it can reach the socket.
func TestTenantsOverSocketByUID(t *testing.T) {
	testutil.RequirePrivileged(t)
	ts := startServer(t, Config{Group: "nogroup"})
	const nobody, nogroup, other = 65534, 65534, 65533
	old := manifestBody("root-agent", "root-s", "MUTATES FILE:/shared/**")
	old["timestamp"] = time.Now().Add(-time.Minute).UnixMilli()
	st, m := ts.call(t, "POST", "/v1/manifest", old)
	if st != 200 {
		t.Fatalf("root: %d %v", st, m)
	}
	rootID := leaseIDs(t, m)[0]

	st, m = asChild(t, ts, nobody, nogroup, "GET", "/v1/leases", nil)
	if st != 200 || len(m["leases"].([]any)) != 0 {
		t.Fatalf("nobody lists: %d %v", st, m)
	}
	st, m = asChild(t, ts, nobody, nogroup, "POST", "/v1/leases/release", map[string]any{"lease_ids": []string{rootID}})
	if st != 404 || m["error_class"] != "not_found" {
		t.Fatalf("nobody releases root's lease: %d %v", st, m)
	}
	st, m = asChild(t, ts, nobody, nogroup, "POST", "/v1/manifest", manifestBody("n", "ns", "MUTATES FILE:/shared/a"))
	if st != 409 || get(m, "conflicts", 0, "held", "redacted") != true || get(m, "conflicts", 0, "held", "lease_id") != nil {
		t.Fatalf("nobody's conflict: %d %v", st, m)
	}
	st, m = asChild(t, ts, nobody, nogroup, "POST", "/v1/manifest", manifestBody("n", "ns", "MUTATES FILE:/mine/**"))
	if st != 200 || get(m, "leases", 0, "tenant") != "uid:65534" {
		t.Fatalf("nobody acquires: %d %v", st, m)
	}
	nobodyID := leaseIDs(t, m)[0]
	st, m = asChild(t, ts, other, nogroup, "GET", "/v1/resource/"+url.PathEscape("FILE:/mine/x")+"/state", nil)
	if st != 200 || len(m["leases"].([]any)) != 0 || num(m["hidden"]) != 1 {
		t.Fatalf("uid %d's state of nobody's resource: %d %v", other, st, m)
	}
	st, m = asChild(t, ts, other, nogroup, "POST", "/v1/leases/revoke", map[string]any{"id": nobodyID})
	if st != 404 {
		t.Fatalf("uid %d revokes nobody's lease: %d %v", other, st, m)
	}
	// Root sees both tenants.
	_, m = ts.call(t, "GET", "/v1/leases", nil)
	tenants := map[string]bool{}
	for _, l := range m["leases"].([]any) {
		tenants[str(get(l, "tenant"))] = true
	}
	if len(tenants) != 2 || !tenants["uid:0"] || !tenants["uid:65534"] {
		t.Fatalf("root sees tenants %v", tenants)
	}
	// A uid outside the group, let through the file mode, is refused by
	// the server itself.
	if err := os.Chmod(ts.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	st, m = asChild(t, ts, 65532, 65532, "GET", "/v1/leases", nil)
	if st != 403 || m["error_class"] != "forbidden" || !strings.Contains(str(m["message"]), `group "nogroup"`) {
		t.Fatalf("uid outside the group: %d %v", st, m)
	}
}

// A tenant may hold maxStreams event streams open; one more is 429, and
// another tenant is not affected.
func TestStreamQuota(t *testing.T) {
	_, _, hs := handlerServer(t)
	open := func(tenant string) *http.Response {
		req, _ := http.NewRequest("GET", hs.URL+"/v1/events", nil)
		req.Header.Set("X-Test-Tenant", tenant)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := range maxStreams {
		if r := open("uid:1001"); r.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i, r.StatusCode)
		}
	}
	r := open("uid:1001")
	var e Error
	if err := json.NewDecoder(r.Body).Decode(&e); err != nil || r.StatusCode != 429 || e.Class != ClassRateLimited {
		t.Fatalf("one stream too many: %d %+v %v", r.StatusCode, e, err)
	}
	if r := open("uid:1002"); r.StatusCode != 200 {
		t.Fatalf("another tenant's stream: %d", r.StatusCode)
	}
}
