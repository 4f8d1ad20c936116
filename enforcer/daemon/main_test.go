//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

const agentUID = 65534

// Environment of the helper client subprocess.
const (
	envHelper       = "KLOCKD_TEST_CLIENT" // the request: "ps" or "run-as-root"
	envHelperSocket = "KLOCKD_TEST_SOCKET"
)

func TestMain(m *testing.M) {
	launch.Init()
	if req := os.Getenv(envHelper); req != "" {
		os.Exit(helperClient(req))
	}
	os.Exit(m.Run())
}

// helperReply is what the helper client prints: how klockd answered.
type helperReply struct {
	OK      bool   `json:"ok"`
	Class   string `json:"class,omitempty"`
	Message string `json:"message,omitempty"`
}

// helperClient runs one request against the socket in envHelperSocket, as
// whoever the test started it as, and prints a helperReply.
func helperClient(req string) int {
	var err error
	cl, err := Dial(os.Getenv(envHelperSocket))
	if err == nil {
		switch req {
		case "ps":
			_, err = cl.PS()
		case "run-as-root":
			_, err = cl.Run(context.Background(), &Run{RunRequest: RunRequest{
				Manifest:     []byte("apiVersion: klock/v1\nagent: {id: x}\nmode: permissive\nbaseline: system-ro\nintents: [PROVIDES PROC:/usr/bin/**]\n" + costEnvelope),
				ManifestPath: "x.yaml", Argv: []string{"/bin/true"}, UID: 0, GID: 0, AllowRoot: true, AllowDegraded: true}})
		case "events":
			return helperEvents()
		case "adopt":
			_, err = cl.Adopt(&AdoptRequest{Manifest: []byte("x"), ContainerID: "c1", Pid: os.Getpid()})
		default:
			err = fmt.Errorf("unknown helper request %q", req)
		}
	}
	r := helperReply{OK: err == nil}
	if err != nil {
		r.Message = err.Error()
		var de *Error
		if errors.As(err, &de) {
			r.Class = de.Class
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// startServer runs a klockd server in-process on a socket in a fresh
// directory, and shuts it down at the end of the test.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	testutil.RequirePrivileged(t)
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(testutil.OpenDir(t, -1), "klockd.sock")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e := s.Backends().ObserverErr; e != nil {
		testutil.Unavailable(t, "the observation backend cannot load: "+e.Error())
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if _, err := os.Stat(s.Addr()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s left behind (%v)", s.Addr(), err)
		}
	})
	return s
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

const costEnvelope = testutil.CostEnvelope

// manifest writes a tiny manifest for an agent-owned workdir.
func manifest(t testing.TB, mode policy.Mode, intents ...string) (wd, path string, data []byte) {
	t.Helper()
	wd = testutil.OpenDir(t, agentUID)
	data = []byte(testutil.ManifestYAML("daemon-test", string(mode), wd,
		append([]string{"CONSUMES FILE:${workdir}/**", "PROVIDES PROC:/usr/bin/**"}, intents...)...))
	path = filepath.Join(testutil.OpenDir(t, -1), "agent.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return wd, path, data
}

// helperEvents publishes a gateway record as the helper's uid, then
// follows klockd's records (from a minute back) until its own arrives,
// and prints kind/owner of each it was shown.
func helperEvents() int {
	socket := os.Getenv(envHelperSocket)
	pub := NewPublisher(socket)
	pub.Publish(eventlog.Record{Kind: eventlog.KindToolDenied, Tool: &eventlog.Tool{Name: "x"}})
	pub.Close()
	cl, err := Dial(socket)
	var seen []string
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		own := fmt.Sprintf("uid:%d", os.Getuid())
		err = cl.Events(ctx, EventsRequest{Follow: true, Since: time.Now().Add(-time.Minute)}, func(r eventlog.Record) error {
			seen = append(seen, string(r.Kind)+"/"+r.Owner)
			if r.Kind == eventlog.KindToolDenied && r.Owner == own {
				cancel()
			}
			return nil
		})
	}
	r := helperReply{OK: err == nil, Message: strings.Join(seen, ",")}
	if err != nil {
		r.Message = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}
