//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/klocklabs/klock/internal/testutil"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/leaseapi"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
)

// Without klockd, klock leases reads the host's lease store as root (the
// embedded sessions' leases are there) and revokes there; anyone else is
// told klockd is not running (exit 3).
func TestLeasesWithoutKlockd(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "api.sock")
	if os.Geteuid() != 0 {
		_, code, err := execute("leases", "--socket", missing)
		if code != exitNoDaemon || !errors.Is(err, leaseapi.ErrNoServer) || !strings.Contains(err.Error(), "klockd") {
			t.Fatalf("exit %d: %v", code, err)
		}
		return
	}
	st, err := session.HostLeases()
	if err != nil {
		t.Fatal(err)
	}
	sess := "leases-cli-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	in, _ := policy.ParseIntent("MUTATES FILE:" + t.TempDir() + "/**")
	c, _, _ := lease.FromIntent(in)
	h := lease.Holder{Tenant: "uid:0", Agent: "cli-test", Session: sess}
	if d, err := st.Acquire(context.Background(), lease.Request{Holder: h, Claims: []lease.Claim{c}}); err != nil || d.Outcome != lease.Granted {
		t.Fatalf("acquire: %+v %v", d, err)
	}
	defer st.Release(context.Background(), h)
	out, code, err := execute("leases", "--json", "--socket", missing)
	if code != 0 || err != nil || !strings.Contains(out, sess) {
		t.Fatalf("klock leases without klockd, as root: exit %d %v\n%s", code, err, out)
	}
	if out, code, err := execute("leases", "revoke", sess, "--socket", missing); code != 0 || err != nil {
		t.Fatalf("revoke: exit %d %v\n%s", code, err, out)
	}
	if ls, _ := st.List(context.Background(), lease.Filter{Session: sess}); len(ls) != 0 {
		t.Fatalf("still held after revoke: %+v", ls)
	}
	if _, code, _ := execute("leases", "revoke", sess, "--socket", missing); code != exitInvalid {
		t.Fatalf("revoke of nothing: exit %d, want %d", code, exitInvalid)
	}
}

// klock leases lists what the API holds (table and JSON) and revokes a
// lease by id.
func TestLeasesListAndRevoke(t *testing.T) {
	// This process must be a member of the server's group (or root).
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		testutil.Unavailable(t, "no name for this process's group: "+err.Error())
	}
	s, err := leaseapi.New(leaseapi.Config{Store: lease.NewTable(), Group: g.Name})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := leaseapi.ListenUnix(sock, "klock-test-no-such-group")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeUnix(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	r, err := leaseapi.Dial(sock).Acquire(context.Background(), leaseapi.ManifestRequest{AgentID: "coder", SessionID: "run-1",
		Intents: []string{"MUTATES FILE:/srv/repo/src/**"}})
	if err != nil || r.Outcome != "GRANTED" {
		t.Fatalf("acquire: %+v %v", r, err)
	}
	id := r.Leases[0].LeaseID
	out, code := run(t, "leases", "--socket", sock)
	if code != exitOK || !strings.Contains(out, "LEASE") || !strings.Contains(out, id) || !strings.Contains(out, "FILE:/srv/repo/src/**") ||
		!strings.Contains(out, "coder") || !strings.Contains(out, "run-1") || !strings.Contains(out, "in 1m0s") && !strings.Contains(out, "in 59s") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	out, code = run(t, "leases", "--json", "--socket", sock)
	var ls []leaseapi.Lease
	if code != exitOK || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 1 || ls[0].LeaseID != id || ls[0].Predicate != "MUTATES" {
		t.Fatalf("json: exit %d\n%s", code, out)
	}
	if out, code := run(t, "leases", "revoke", id, "--socket", sock); code != exitOK || !strings.Contains(out, "revoked 1 lease") {
		t.Fatalf("revoke: exit %d\n%s", code, out)
	}
	if _, code, err := execute("leases", "revoke", id, "--socket", sock); code != exitInvalid || !errors.Is(err, leaseapi.ErrNotFound) {
		t.Fatalf("revoke again: exit %d %v", code, err)
	}
	if out, code := run(t, "leases", "--json", "--socket", sock); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("after revoke: exit %d\n%s", code, out)
	}
}
