package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/toolerr"
	"golang.org/x/sys/unix"
)

// FuzzToolArgs feeds arbitrary JSON arguments and context to every refund
// agent tool: Decide must never panic, and a denial must be a typed error
// of a known class with a message.
func FuzzToolArgs(f *testing.F) {
	f.Add("issue_refund", `{"customer_id":"c_42","transaction_id":"t","amount_usd":20,"reason_code":"DUPLICATE"}`, `{"task":{"customer_id":"c_42"},"account":{"tier":"smb"}}`)
	f.Add("get_account", `{"customer_id":["c_42"]}`, `{"task":{"customer_id":["c_42"]}}`)
	f.Add("draft_email", `{"customer_id":"c_42","body":null}`, `{"task.customer_id":"c_42"}`)
	f.Add("issue_refund", `{"amount_usd":1e309}`, `{}`)
	f.Add("send_email", `{"draft_id":{"a":[1,2,{}]}}`, `null`)
	p, err := New(example(f, "refund-agent.yaml"), WithClock(func() time.Time { return time.Unix(0, 0) }))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tool, args, ctx string) {
		var a, c map[string]any
		if json.Unmarshal([]byte(args), &a) != nil {
			return
		}
		_ = json.Unmarshal([]byte(ctx), &c)
		d := p.Decide(&Call{Tool: tool, Args: a, Context: c, RunID: args})
		if d.Verdict == Deny {
			if d.Err == nil || !toolerr.Valid(d.Err.Class) || d.Err.Message == "" {
				t.Fatalf("untyped denial: %+v", d.Err)
			}
		}
	})
}

// FuzzPathWithin feeds arbitrary paths below a tree with links that stay
// and links that leave (pathTree). Whatever the gateway allows, the kernel
// must agree: opened as written and after a lexical clean (the two ways a
// tool takes a path), the file, or for a file to be created its parent
// directory, is inside root/data. The kernel is the oracle, not the
// resolver's own logic.
func FuzzPathWithin(f *testing.F) {
	for _, s := range []string{"hello.txt", "../outside/secret.txt", "sub/../../outside", "//hello.txt", "./x/../..",
		"in/../hello.txt", "out/secret.txt", "abs/x", "up/outside", "deep", "loop/x", "missing/../../outside", "srclink/../../outside/secret.txt",
		"up/../x", "out/../x", "in/../../x", "inner/../../x"} {
		f.Add(s)
	}
	root, p := pathTree(f)
	data := root + "/data"
	f.Fuzz(func(t *testing.T, rel string) {
		arg := data + "/" + rel
		d := p.Decide(&Call{Tool: "read_text_file", Args: map[string]any{"path": arg}})
		if d.Verdict == Deny {
			if d.Err == nil || d.Err.Class != toolerr.InvalidArgs {
				t.Fatalf("untyped path refusal: %+v", d.Err)
			}
			return
		}
		for _, view := range []string{arg, filepath.Clean(arg)} {
			if got, ok := kernelOpens(view); ok && got != data && !strings.HasPrefix(got, data+"/") {
				t.Fatalf("allowed %q, and the kernel opens %s (outside %s)", arg, got, data)
			}
		}
	})
}

// kernelOpens returns where the kernel takes p: the file it opens, or the
// directory a file of that name would be created in. ok is false when the
// kernel refuses both (the tool would fail too).
func kernelOpens(p string) (string, bool) {
	if got, err := openedAt(p); err == nil {
		return got, true
	}
	i := strings.LastIndexByte(strings.TrimRight(p, "/"), '/')
	if i < 0 {
		return "", false
	}
	base := p[i+1:]
	if base == "." || base == ".." || strings.Contains(base, "\x00") {
		return "", false
	}
	dir := p[:i]
	if dir == "" {
		dir = "/"
	}
	got, err := openedAt(dir)
	return got, err == nil
}

func openedAt(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
}
