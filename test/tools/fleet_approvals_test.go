package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/fleet"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
)

// fleetHost is one "host" of a fleet on this machine: its fleet marker
// (KLOCK_FLEET_MARKER) and its own state directory.
type fleetHost struct {
	name, marker, state string
}

func newFleetHost(t *testing.T, dir, name string, c fleet.Config) fleetHost {
	t.Helper()
	c.Host = name
	b, _ := json.Marshal(c)
	h := fleetHost{name: name, marker: filepath.Join(dir, name+".json"), state: filepath.Join(dir, name+"-state")}
	write(t, h.marker, string(b), 0o644)
	return h
}

func (h fleetHost) env() []string { return append(os.Environ(), fleet.MarkerEnv+"="+h.marker) }

// klock runs the klock binary as this host: its stdout, stderr and exit
// status.
func (h fleetHost) klock(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(klockBin, append(args, "--state-dir", h.state)...)
	cmd.Env = h.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// pendingOn polls klock approvals --json as h until a pending request for
// tool shows, and returns its id and the host that filed it.
func (h fleetHost) pendingOn(t *testing.T, tool string) (id, host string) {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		out, stderr, code := h.klock(t, "approvals", "--json")
		if code != 0 {
			t.Fatalf("klock approvals as %s: exit %d: %s", h.name, code, stderr)
		}
		var list []struct{ ID, Tool, State, Host string }
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("klock approvals --json: %v: %s", err, out)
		}
		for _, r := range list {
			if r.Tool == tool && r.State == "pending" {
				return r.ID, r.Host
			}
		}
	}
	t.Fatalf("no pending approval for %s seen from %s", tool, h.name)
	return "", ""
}

// tryPost is post for a goroutine: a failure to reach the gateway is a
// reply of class "transport" rather than a test failure.
func tryPost(base, body string) reply {
	resp, err := http.Post(base+"/v1/tools/call", "application/json", strings.NewReader(body))
	if err != nil {
		return reply{Class: "transport", Message: err.Error()}
	}
	defer resp.Body.Close()
	var r reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return reply{Status: resp.StatusCode, Class: "transport", Message: err.Error()}
	}
	r.Status = resp.StatusCode
	return r
}

// serveOn starts klock tools serve as host h (run run) and returns its
// URL and a function that kills it (a crash).
func serveOn(t *testing.T, h fleetHost, manifest, plugins, run string) (string, func()) {
	t.Helper()
	url, _, crash := startServe(t, "", h.env(), "-m", manifest, "--plugins", plugins, "--state-dir", h.state, "--run-id", run)
	return url, crash
}

// TestFleetApprovals: a gateway on host A waits for a human; host B's
// klock approvals lists the call with host A, and B's approve or deny
// decides it. Of an approve on A and a deny on B at once, exactly one
// is made, and the call follows it. With the fleet's etcd gone, the call
// is refused as unreachable and klock approvals exits 125.
func TestFleetApprovals(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := etcdtest.Start(t, 3)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	cfg := fleet.Config{Endpoints: c.Endpoints(), Prefix: fmt.Sprintf("/fleet-approvals-%d", time.Now().UnixNano())}
	a, b := newFleetHost(t, base, "host-a", cfg), newFleetHost(t, base, "host-b", cfg)
	plugins, sent := filepath.Join(base, "plugins"), filepath.Join(base, "sent")
	os.MkdirAll(sent, 0o777)
	os.Chmod(sent, 0o1777)
	// post records each message it was let through to send.
	plugin(t, plugins, "post", fmt.Sprintf(`{"network":false,"filesystem":{"read":[],"write":[%q]}}`, sent+"/**"),
		fmt.Sprintf("read -r line\necho \"$line\" >> %s/log\nprintf '{\"output\":\"sent\"}\\n'\n", sent))
	// post touches nothing (touches: []): the calls take no lease, so what
	// this test sees is their approval alone.
	manifest := filepath.Join(base, "agent.yaml")
	write(t, manifest, fmt.Sprintf(`apiVersion: klock/v1
agent: {id: fleet-agent-%d, version: 1.0.0}
mode: strict
workdir: %s
intents: []
declared_tools:
  - {name: post, type: external, blast_radius: domain, side_effects: IRREVERSIBLE-WRITE, timeout_ms: 30000, touches: [],
     idempotency: {mode: key, key_source: "hash(msg)"}, input_schema: {msg: {type: string, max_length: 20}}}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL, approval_timeout_seconds: 60}
`, time.Now().UnixNano(), base), 0o644)
	top := t
	url, crash := serveOn(t, a, manifest, plugins, "run_fleet")
	call := func(msg string) chan reply {
		ch := make(chan reply, 1)
		u := url
		go func() { ch <- tryPost(u, fmt.Sprintf(`{"tool":"post","args":{"msg":%q}}`, msg)) }()
		return ch
	}
	recv := func(t *testing.T, ch chan reply) reply {
		t.Helper()
		select {
		case r := <-ch:
			t.Logf("-> %d %+v", r.Status, r)
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("no reply to the call")
		}
		return reply{}
	}
	sentLog := func() string { b, _ := os.ReadFile(filepath.Join(sent, "log")); return string(b) }

	t.Run("approve on another host", func(t *testing.T) {
		done := call("one")
		id, host := b.pendingOn(t, "post")
		if host != "host-a" {
			t.Fatalf("the request names host %q, want host-a", host)
		}
		out, _, code := b.klock(t, "approvals")
		if code != 0 || !strings.Contains(out, "HOST") || !strings.Contains(out, "host-a") || !strings.Contains(out, id) {
			t.Fatalf("klock approvals as host-b (exit %d):\n%s", code, out)
		}
		if strings.Contains(sentLog(), "one") {
			t.Fatal("the call went through before approval")
		}
		if out, stderr, code := b.klock(t, "approve", id); code != 0 {
			t.Fatalf("klock approve as host-b: exit %d: %s%s", code, out, stderr)
		}
		if r := recv(t, done); !r.OK || !strings.Contains(sentLog(), "one") {
			t.Fatalf("approved call: %+v, sent %q", r, sentLog())
		}
	})

	t.Run("deny on another host", func(t *testing.T) {
		done := call("two")
		id, _ := b.pendingOn(t, "post")
		if _, stderr, code := b.klock(t, "deny", id, "--note", "not today"); code != 0 {
			t.Fatalf("klock deny as host-b: exit %d: %s", code, stderr)
		}
		r := recv(t, done)
		if r.OK || r.Class != "tool_restricted" || r.Reason != "approval_denied" || !strings.Contains(r.Message, "not today") {
			t.Fatalf("denied call: %+v", r)
		}
		if strings.Contains(sentLog(), "two") {
			t.Fatal("a denied call went through")
		}
	})

	t.Run("a gateway crash loses nothing", func(t *testing.T) {
		// The agent's connection dies with the gateway: no reply to read.
		go http.Post(url+"/v1/tools/call", "application/json", strings.NewReader(`{"tool":"post","args":{"msg":"five"}}`))
		id, _ := b.pendingOn(t, "post")
		crash()
		// The restarted gateway outlives this subtest.
		url, crash = serveOn(top, a, manifest, plugins, "run_fleet")
		// The agent retries the same call: it waits on the same request.
		done := call("five")
		if again, _ := b.pendingOn(t, "post"); again != id {
			t.Fatalf("after a restart the retry waits on %s, not %s", again, id)
		}
		if _, stderr, code := b.klock(t, "approve", id); code != 0 {
			t.Fatalf("klock approve as host-b: exit %d: %s", code, stderr)
		}
		if r := recv(t, done); !r.OK || strings.Count(sentLog(), `"five"`) != 1 {
			t.Fatalf("the approved retry: %+v, sent %q", r, sentLog())
		}
	})

	t.Run("approve on A and deny on B at once", func(t *testing.T) {
		done := call("three")
		id, _ := b.pendingOn(t, "post")
		codes := make(chan [2]int, 2)
		for i, d := range []struct {
			h    fleetHost
			verb string
		}{{a, "approve"}, {b, "deny"}} {
			go func() { _, _, code := d.h.klock(t, d.verb, id); codes <- [2]int{i, code} }()
		}
		won := -1
		for range 2 {
			c := <-codes
			switch c[1] {
			case 0:
				if won >= 0 {
					t.Fatal("both the approval and the denial were made")
				}
				won = c[0]
			case 1: // already decided
			default:
				t.Fatalf("decision %d: exit %d", c[0], c[1])
			}
		}
		if won < 0 {
			t.Fatal("neither decision was made")
		}
		r := recv(t, done)
		if approved := won == 0; r.OK != approved || strings.Contains(sentLog(), "three") != approved {
			t.Fatalf("the approval won: %v; the call: %+v, sent %q", approved, r, sentLog())
		}
		t.Logf("the %s won", map[bool]string{true: "approval on host-a", false: "denial on host-b"}[won == 0])
	})

	t.Run("etcd unreachable", func(t *testing.T) {
		c.Stop()
		done := call("four")
		for _, verb := range []string{"approvals", "deny"} {
			args := []string{verb}
			if verb == "deny" {
				args = append(args, "ap_0123456789ab")
			}
			if _, stderr, code := b.klock(t, args...); code != 125 || !strings.Contains(stderr, "unreachable") {
				t.Fatalf("klock %s with etcd gone: exit %d: %s", verb, code, stderr)
			}
		}
		if r := recv(t, done); r.OK || r.Reason != "approval_unreachable" || !strings.Contains(r.Message, "unreachable") {
			t.Fatalf("a call needing approval with the queue gone: %+v", r)
		}
		if strings.Contains(sentLog(), "four") {
			t.Fatal("a call went through without its approval queue")
		}
	})
}
