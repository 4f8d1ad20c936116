package tools

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"
)

// startServe runs `klock tools serve --listen ADDR ARGS...` (in dir, with
// env when not nil) until the test ends, waits until it answers, and
// returns its URL, a function that stops it (SIGINT, once) and one that
// kills it (SIGKILL: a crash).
func startServe(t *testing.T, dir string, env []string, args ...string) (url string, stop, crash func()) {
	t.Helper()
	return startServeLogged(t, dir, env, nil, args...)
}

// startServeLogged is startServe whose output also goes to log (nil: the
// test's log only).
func startServeLogged(t *testing.T, dir string, env []string, log io.Writer, args ...string) (url string, stop, crash func()) {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, klockBin, append([]string{"tools", "serve", "--listen", addr}, args...)...)
	var out io.Writer = logWriter{t}
	if log != nil {
		out = io.MultiWriter(out, log)
	}
	srv.Stdout, srv.Stderr = out, out
	srv.Dir, srv.Env = dir, env
	srv.Cancel = func() error { return srv.Process.Signal(os.Interrupt) }
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			srv.Wait()
		}
	}
	t.Cleanup(stop)
	crash = func() { srv.Process.Kill(); stop() }
	url = "http://" + addr
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/v1/tools"); err == nil {
			resp.Body.Close()
			return url, stop, crash
		}
		if time.Now().After(end) {
			t.Fatal("klock tools serve did not start")
		}
	}
}
