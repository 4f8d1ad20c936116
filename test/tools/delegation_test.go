package tools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/internal/testutil"
)

// Seed 003's delegation, end to end with two real gateways sharing one
// budget ledger in turn: the parent spends; a sub-agent's gateway started
// with --parent-grant spends under a child grant that only tightens it,
// and the child's spend is charged to the parent too (the parent's next
// run has less left); a child that would widen what the parent has left is
// refused at start, naming the grant and the limit; klock report shows
// the tree.
func TestDelegatedChildSpendIsChargedToBoth(t *testing.T) {
	f := newDelegation(t)
	plugins, receipts, base := f.plugins, f.receipts, f.dir
	parent := base("parent")
	url, stop := serve(t, parent, plugins, parentDecl, "--receipts", receipts)
	if r := post(t, url, `{"tool":"quote","args":{}}`); !r.OK || r.Charged == nil || r.Charged.Units != 30 {
		t.Fatalf("parent's call: %+v", r)
	}
	stop()
	grant := agentID(t, parent) + "#0"

	// The child: 0.50 USD of the 0.70 USD its parent has left.
	url, stop = serve(t, base("child"), plugins, childDecl, "--receipts", receipts, "--parent-grant", grant)
	if r := post(t, url, `{"tool":"quote","args":{}}`); !r.OK || r.Charged == nil || r.Charged.Units != 30 {
		t.Fatalf("child's call: %+v", r)
	}
	stop()

	// A second child asking for 0.50 USD of the 0.40 USD left is refused.
	out, err := f.wideChild(t, "--receipts", receipts, "--parent-grant", grant)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(string(out), "grants[0] (quote) delegated by cost_envelope.parent_grant "+grant) ||
		!strings.Contains(string(out), "max_total_cost 0.50 USD is more than the parent's remaining 0.40 USD") {
		t.Fatalf("a widening child: %v\n%s", err, out)
	}

	// The parent's ledger counted the child's 0.30: of its 1.00 USD, 0.60
	// is spent, so one more 0.40 pre-charge fits and a second does not
	// (without the child's spend it would: 0.60 + 0.40).
	url, stop = serve(t, parent, plugins, parentDecl, "--receipts", receipts)
	if r := post(t, url, `{"tool":"quote","args":{}}`); !r.OK {
		t.Fatalf("parent's second call: %+v", r)
	}
	if r := post(t, url, `{"tool":"quote","args":{}}`); r.OK || r.Reason != "budget" || !strings.Contains(r.Message, "max_total_cost") {
		t.Fatalf("parent's third call, past what the child left: %+v", r)
	}
	stop()
	rep, err := exec.Command(klockBin, "report", receipts).CombinedOutput()
	want := []string{
		fmt.Sprintf("delegation %s (quote): 0.90 USD charged (own calls 0.60 USD), 2 invocation(s) of its own", grant),
		fmt.Sprintf("  └ %s#0 (quote): 0.30 USD charged, 1 invocation(s) of its own", agentID(t, filepath.Join(f.root, "child"))),
	}
	if err != nil || !strings.Contains(string(rep), strings.Join(want, "\n")) {
		t.Fatalf("klock report: %v\n%s\nwant:\n%s", err, rep, strings.Join(want, "\n"))
	}
}

// The parent's grant: 0.40 USD a call, 1.00 USD in all; a child's: 0.50
// USD in all. The quote plugin costs 0.30 USD a call.
var (
	parentDecl = readTools("quote") + "grants:\n  - {tool: quote, max_cost_per_invocation: \"0.40 USD\", max_total_cost: \"1.00 USD\"}\n"
	childDecl  = readTools("quote") + "grants:\n  - {tool: quote, max_cost_per_invocation: \"0.40 USD\", max_total_cost: \"0.50 USD\"}\n"
)

// delegation is a delegation test's plugins and shared receipts directory.
type delegation struct{ root, plugins, receipts string }

func newDelegation(t *testing.T) *delegation {
	root := privilegedRoot(t)
	f := &delegation{root: root, plugins: filepath.Join(root, "plugins"), receipts: filepath.Join(root, "receipts")}
	plugin(t, f.plugins, "quote", `{"network":false,"filesystem":false}`, "read -r line\nprintf '{\"output\":\"ok\",\"cost\":\"0.30 USD\"}\\n'\n")
	return f
}

// dir is an agent's directory (its manifest and state) under the root.
func (f *delegation) dir(name string) string {
	d := filepath.Join(f.root, name)
	os.MkdirAll(d, 0o755)
	return d
}

// wideChild starts a child gateway asking for 0.50 USD with args (the
// ledger flags), expecting it to be refused: its output and exit.
func (f *delegation) wideChild(t *testing.T, args ...string) ([]byte, error) {
	wide := f.dir("wide")
	serve(t, wide, f.plugins, childDecl, "--receipts", filepath.Join(wide, "own-receipts")) // writes its manifest
	return exec.Command(klockBin, append([]string{"tools", "serve", "--listen", freeAddr(t), "-m", filepath.Join(wide, "agent.yaml"),
		"--plugins", f.plugins, "--state-dir", filepath.Join(wide, "state2")}, args...)...).CombinedOutput()
}

// privilegedRoot is a test's directory, reachable by the plugins' user, for
// a test that needs root.
func privilegedRoot(t *testing.T) string {
	t.Helper()
	testutil.RequirePrivileged(t)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The same delegation with both gateways running at once: the
// sub-agent's gateway charges its child grant in the parent's ledger
// through the parent's control socket (--parent-gateway), so the parent's
// next call sees the child's spend at once; a widening child is refused at
// start; the child's receipts are in the parent's chain, naming the child.
func TestDelegatedChildChargesThroughTheParentsGateway(t *testing.T) {
	f := newDelegation(t)
	plugins, receipts, dir := f.plugins, f.receipts, f.dir
	parent := dir("parent")
	parentURL, stopParent := serve(t, parent, plugins, parentDecl, "--receipts", receipts)
	grant, sock := agentID(t, parent)+"#0", filepath.Join(parent, "state", "control.sock")
	if r := post(t, parentURL, `{"tool":"quote","args":{}}`); !r.OK {
		t.Fatalf("parent's call: %+v", r)
	}
	child := dir("child")
	childURL, stopChild := serve(t, child, plugins, childDecl, "--parent-gateway", sock, "--parent-grant", grant)
	if r := post(t, childURL, `{"tool":"quote","args":{}}`); !r.OK || r.Charged == nil || r.Charged.Units != 30 {
		t.Fatalf("child's call: %+v", r)
	}
	// 0.60 of the parent's 1.00 is spent: one more 0.40 pre-charge fits,
	// a second does not.
	if r := post(t, parentURL, `{"tool":"quote","args":{}}`); !r.OK {
		t.Fatalf("parent's second call: %+v", r)
	}
	if r := post(t, parentURL, `{"tool":"quote","args":{}}`); r.OK || r.Reason != "budget" {
		t.Fatalf("parent's third call, past what the child left: %+v", r)
	}
	// 0.10 is left: a new child asking for 0.50 is refused at start.
	out, err := f.wideChild(t, "--parent-gateway", sock, "--parent-grant", grant)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "is more than the parent's remaining 0.10 USD") {
		t.Fatalf("a widening child: %v\n%s", err, out)
	}
	stopChild()
	stopParent()
	rep, err := exec.Command(klockBin, "report", receipts).CombinedOutput()
	childGrant := agentID(t, child) + "#0"
	if err != nil || !strings.Contains(string(rep), fmt.Sprintf("delegation %s (quote): 0.90 USD charged (own calls 0.60 USD)", grant)) ||
		!strings.Contains(string(rep), "└ "+childGrant+" (quote): 0.30 USD charged") {
		t.Fatalf("klock report: %v\n%s", err, rep)
	}
	if out, err := exec.Command(klockBin, "receipts", "verify", receipts).CombinedOutput(); err != nil {
		t.Fatalf("klock receipts verify: %v\n%s", err, out)
	}
	// The child's pre-charge and reconcile are in the parent's chain,
	// naming the child and its parent grant.
	var named []string
	receipt.VerifyFile(filepath.Join(receipts, "receipts.jsonl"), nil, func(r *receipt.Receipt) error {
		if r.CapabilityID == agentID(t, child) {
			named = append(named, r.Phase+" "+r.AgentID+" "+r.Metadata.Financial.ParentGrant)
		}
		return nil
	})
	id := agentID(t, child)
	if strings.Join(named, ",") != "pre-charge "+id+" "+grant+",reconcile "+id+" "+grant {
		t.Fatalf("the child's receipts in the parent's chain: %v", named)
	}
}
