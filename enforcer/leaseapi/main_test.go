//go:build linux

package leaseapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/testutil"
)

// envChild makes the test binary a one-request HTTP client of the API
// (run as another uid by the tenancy tests): the request is the variable's
// JSON (childRequest), the answer is printed as a childAnswer.
const envChild = "KLOCK_LEASEAPI_TEST_CHILD"

type childRequest struct {
	Socket string          `json:"socket"`
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body,omitempty"`
}

type childAnswer struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body,omitempty"`
	Err    string          `json:"err,omitempty"`
}

func TestMain(m *testing.M) {
	if req := os.Getenv(envChild); req != "" {
		os.Exit(runChild(req))
	}
	os.Exit(m.Run())
}

func runChild(spec string) int {
	var rq childRequest
	var ans childAnswer
	if err := json.Unmarshal([]byte(spec), &rq); err != nil {
		ans.Err = err.Error()
	} else {
		hc := unixHTTP(rq.Socket)
		var body io.Reader
		if rq.Body != nil {
			body = bytes.NewReader(rq.Body)
		}
		req, _ := http.NewRequest(rq.Method, "http://klockd"+rq.Path, body)
		resp, err := hc.Do(req)
		if err != nil {
			ans.Err = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ans.Status, ans.Body = resp.StatusCode, b
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(ans)
	return 0
}

// unixHTTP is a plain net/http client of a unix socket: what any
// orchestrator would write.
func unixHTTP(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 16,
	}}
}

// testServer is a Server on a real unix socket.
type testServer struct {
	*Server
	table  *lease.Table
	socket string
	hc     *http.Client
}

// testGroup is the group whose members the test server lets in: nogroup
// as root (the tenancy tests run clients as uids in it), else this
// process's own primary group, so unprivileged runs are members.
func testGroup(t testing.TB) string {
	t.Helper()
	if os.Geteuid() == 0 {
		return "nogroup"
	}
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		testutil.Unavailable(t, "this process's primary group has no name: "+err.Error())
	}
	return g.Name
}

// startServer serves a fresh Table on a unix socket for the test.
func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	tb := lease.NewTable()
	if cfg.Store == nil {
		cfg.Store = tb
	}
	if cfg.Group == "" {
		cfg.Group = testGroup(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(testutil.OpenDir(t, -1), "api.sock")
	// Only root may give the socket to a group; otherwise it stays the
	// test user's, who is also its only peer.
	lg := cfg.Group
	if os.Geteuid() != 0 {
		lg = "klock-test-no-such-group"
	}
	ln, err := ListenUnix(socket, lg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeUnix(ln) }()
	ts := &testServer{Server: s, table: tb, socket: socket, hc: unixHTTP(socket)}
	t.Cleanup(func() {
		ts.hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ts
}

// call sends one request with the plain client and decodes the JSON
// answer into a map.
func (ts *testServer) call(t testing.TB, method, path string, body any) (int, map[string]any) {
	t.Helper()
	return callHTTP(t, ts.hc, method, path, body)
}

func callHTTP(t testing.TB, hc *http.Client, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://klockd"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// asChild runs one request as uid:gid (in the server's group) from a copy
// of the test binary, and returns its answer.
func asChild(t *testing.T, ts *testServer, uid, gid uint32, method, path string, body any) (int, map[string]any) {
	t.Helper()
	testutil.RequirePrivileged(t)
	self, err := testutil.CopySelf(testutil.OpenDir(t, -1), "leaseapi.test")
	if err != nil {
		t.Fatal(err)
	}
	rq := childRequest{Socket: ts.socket, Method: method, Path: path}
	if body != nil {
		if rq.Body, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	spec, _ := json.Marshal(rq)
	cmd := exec.Command(self)
	cmd.Env = []string{envChild + "=" + string(spec)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{gid}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child as uid %d: %v\n%s", uid, err, stderr.Bytes())
	}
	var ans childAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		t.Fatalf("child answer %q: %v", out, err)
	}
	if ans.Err != "" {
		t.Fatalf("child as uid %d: %s", uid, ans.Err)
	}
	var m map[string]any
	if err := json.Unmarshal(ans.Body, &m); err != nil {
		t.Fatalf("child as uid %d: %d, not JSON: %q", uid, ans.Status, ans.Body)
	}
	return ans.Status, m
}

// manifestBody is a manifest request of one session.
func manifestBody(agent, session string, intents ...string) map[string]any {
	return map[string]any{"agent_id": agent, "session_id": session, "intents": intents}
}

// leaseIDs are the lease ids of a granted answer.
func leaseIDs(t testing.TB, m map[string]any) []string {
	t.Helper()
	ls, _ := m["leases"].([]any)
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.(map[string]any)["lease_id"].(string))
	}
	return ids
}

// get reads a nested field: get(m, "conflicts", 0, "held", "lease_id").
func get(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := m.(map[string]any)
			if !ok {
				return nil
			}
			m = mm[k]
		case int:
			a, ok := m.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			m = a[k]
		}
	}
	return m
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func str(v any) string { return fmt.Sprint(v) }
