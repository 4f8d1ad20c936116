package trust

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

var klockBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "klock-trust-test-")
	if err != nil {
		panic(err)
	}
	bin, err := testutil.Build(dir, "klock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	klockBin = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// agentUID owns the workdir, so klock run's agent is not root.
const agentUID = 4012347

// fixture is one signing setup: a trusted key, a stranger's key, and the
// manifest signed by each, unsigned, and tampered with after signing.
type fixture struct {
	dir, pub                                   string
	signed, stranger, unsigned, tampered, work string
}

func newFixture(t *testing.T, mode string) fixture {
	t.Helper()
	base := t.TempDir()
	for p := base; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	f := fixture{dir: base, work: filepath.Join(base, "work")}
	must(t, os.Mkdir(f.work, 0o755))
	if os.Geteuid() == 0 {
		must(t, os.Chown(f.work, agentUID, agentUID))
	}
	klock(t, "keygen", "-o", filepath.Join(base, "ops"))
	klock(t, "keygen", "-o", filepath.Join(base, "stranger"))
	f.pub = filepath.Join(base, "ops.pub")
	manifest := testutil.ManifestYAML("trust-agent", mode, f.work, "PROVIDES PROC:/usr/bin/true", "CONSUMES FILE:${workdir}/**")
	f.unsigned = write(t, base, "unsigned.yaml", manifest)
	f.signed = write(t, base, "signed.yaml", manifest)
	klock(t, "sign", "-k", filepath.Join(base, "ops.key"), f.signed)
	f.stranger = write(t, base, "stranger.yaml", manifest)
	klock(t, "sign", "-k", filepath.Join(base, "stranger.key"), f.stranger)
	data, err := os.ReadFile(f.signed)
	must(t, err)
	// The tamper of the issue: a scope widened after review.
	tampered := bytes.Replace(data, []byte("CONSUMES FILE:${workdir}/**"), []byte("MUTATES FILE:${workdir}/**"), 1)
	if bytes.Equal(tampered, data) {
		t.Fatal("fixture: nothing to tamper with")
	}
	f.tampered = write(t, base, "tampered.yaml", string(tampered))
	return f
}

// entry is one entry point: its arguments after -m MANIFEST, and whether it
// serves until stopped (then it has started once it logs "listening").
type entry struct {
	name       string
	args       func(f fixture) []string
	serves     bool
	privileged bool
	refusal    int // exit status of a refused manifest
}

func entries() []entry {
	return []entry{
		{name: "run", privileged: true, refusal: 125, args: func(f fixture) []string {
			return []string{"--no-daemon", "-q", "--", "/usr/bin/true"}
		}},
		{name: "mcp", refusal: 1, args: func(f fixture) []string {
			// stdio: the client (our closed stdin) ends the session at once.
			return []string{"--state-dir", filepath.Join(f.dir, "state"), "--", "/bin/cat"}
		}},
		{name: "meter", serves: true, refusal: 1, args: func(f fixture) []string {
			return []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--prices", "../../examples/prices.yaml",
				"--receipts", filepath.Join(f.dir, "receipts"), "--state-dir", filepath.Join(f.dir, "state")}
		}},
		{name: "tools serve", serves: true, refusal: 1, args: func(f fixture) []string {
			plugins := filepath.Join(f.dir, "plugins")
			os.MkdirAll(plugins, 0o755)
			return []string{"--listen", "127.0.0.1:0", "--plugins", plugins, "--state-dir", filepath.Join(f.dir, "state")}
		}},
	}
}

// TestRequireSignedAtEveryEntryPoint: with
// --require-signed each entry point refuses a manifest tampered with after
// signing (naming the key and the intent that differs), an unsigned one and
// one a stranger signed, and runs the one a trusted key signed.
func TestRequireSignedAtEveryEntryPoint(t *testing.T) {
	f := newFixture(t, "")
	key := strings.TrimSpace(klock(t, "verify", "-k", f.pub, f.signed))
	key = key[strings.LastIndex(key, " ")+1:]
	for _, e := range entries() {
		t.Run(e.name, func(t *testing.T) {
			trust := []string{"--require-signed", "--trust", f.pub, "--trust-dir", ""}
			for _, bad := range []struct {
				file string
				says []string
			}{
				{f.tampered, []string{"changed after it was signed", key, "tampered.yaml:", "intents[1] changed"}},
				{f.unsigned, []string{"not signed", "klock sign"}},
				{f.stranger, []string{"not trusted", "--trust"}},
			} {
				code, out := start(t, e, append(append([]string{"-m", bad.file}, trust...), e.args(f)...))
				if code != e.refusal {
					t.Errorf("%s: exit %d, want the refusal %d\n%s", filepath.Base(bad.file), code, e.refusal, out)
					continue
				}
				for _, s := range bad.says {
					if !strings.Contains(out, s) {
						t.Errorf("%s: the refusal does not say %q:\n%s", filepath.Base(bad.file), s, out)
					}
				}
			}
			if e.privileged && os.Geteuid() != 0 {
				testutil.RequirePrivileged(t)
			}
			if code, out := start(t, e, append(append([]string{"-m", f.signed}, trust...), e.args(f)...)); code != 0 {
				t.Errorf("signed by a trusted key: exit %d\n%s", code, out)
			}
		})
	}
}

// TestPermissiveWarnsOnce: KLIS-6 §3.2 says permissive mode should not be
// used in production; klock run says so, once, even when quiet.
func TestPermissiveWarnsOnce(t *testing.T) {
	testutil.RequirePrivileged(t)
	f := newFixture(t, "permissive")
	code, out := start(t, entries()[0], []string{"-m", f.unsigned, "--no-daemon", "-q", "--", "/usr/bin/true"})
	if code != 0 {
		t.Fatalf("permissive run: exit %d\n%s", code, out)
	}
	if n := strings.Count(out, "must not be used in production"); n != 1 {
		t.Fatalf("the production warning appears %d times, want once:\n%s", n, out)
	}
	_, strict := start(t, entries()[0], []string{"-m", f.unsigned, "--mode", "strict", "--no-daemon", "-q", "--", "/usr/bin/true"})
	if strings.Contains(strict, "production") {
		t.Fatalf("a strict run warns about permissive mode:\n%s", strict)
	}
}

// start runs klock NAME ARGS; a server is stopped with SIGTERM once it
// logs that it listens. It returns the exit status and the output.
func start(t *testing.T, e entry, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, klockBin, append(strings.Fields(e.name), args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stdin = nil // EOF at once: klock mcp's client goes away
	pr, err := cmd.StderrPipe()
	must(t, err)
	must(t, cmd.Start())
	var out strings.Builder
	listening := make(chan struct{}, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if e.serves && strings.Contains(sc.Text(), "listening") && len(listening) == 0 {
				cmd.Process.Signal(syscall.SIGTERM)
				listening <- struct{}{}
			}
		}
	}()
	<-scanned // StderrPipe: read it all before Wait
	err = cmd.Wait()
	out.WriteString(stdout.String())
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatalf("klock %s: %v", e.name, err)
	}
	if e.serves && len(listening) == 0 {
		return -1, out.String() + "\n(exited 0 without listening)"
	}
	return 0, out.String()
}

func klock(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(klockBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("klock %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
