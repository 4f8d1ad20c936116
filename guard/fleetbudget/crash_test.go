package fleetbudget

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/internal/etcdtest"
)

var small = budget.Grant{Key: budget.Key{Capability: "agent-crash", Grant: 0}, Tool: "pay",
	Limits: budget.Limits{Currency: "USD", PerInvocation: u(5), Total: u(10_000), MaxInvocations: 600}}

const childEnv = "FLEETBUDGET_CHILD"

// TestCrashedHostResumesItsBlock: hostA's gateway process takes a block,
// charges 100 calls, leaves one hold open and is killed (SIGKILL). Started
// again on the same ledger it resumes the block etcd keeps for it (no new
// take, nothing lost), settles the open hold, and with hostB the fleet
// charges exactly the grant's invocations; the receipts of both hosts and
// both lives of hostA add up to the fleet ledger.
func TestCrashedHostResumesItsBlock(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := c.Client(t)
	dirA := t.TempDir()
	newHost(t, "hostA", dirA) // the key file, shared with the child
	holdID := runChild(t, dirA, c.Endpoints())
	before := member(t, cli, "hostA")
	if before.Invocations <= 101 || before.UsedInvocations > 101 {
		t.Fatalf("the crashed host's record: %+v", before)
	}
	a := newHost(t, "hostA", dirA)
	a.open(t, cli, WithIdle(0))
	if err := a.led.Define(ctx, small); err != nil {
		t.Fatal(err)
	}
	if u, err := a.store.Usage(ctx, small.Key); err != nil || u.Invocations != 101 || u.OpenHolds != 1 {
		t.Fatalf("usage after the crash: %+v %v", u, err)
	}
	h, err := a.led.Reserve(ctx, budget.Request{Key: small.Key})
	if err != nil {
		t.Fatal(err)
	}
	if after := member(t, cli, "hostA"); after.Invocations != before.Invocations || after.Units != before.Units {
		t.Fatalf("the restarted host took a new block instead of resuming its own: %+v, was %+v", after, before)
	}
	for _, id := range []string{holdID, h.ID} {
		if _, err := a.led.Reconcile(ctx, id, budget.Settle{Actual: usd(2)}); err != nil {
			t.Fatal(err)
		}
	}
	b := newHost(t, "hostB", "")
	b.open(t, cli, WithBlock(16))
	if err := b.led.Define(ctx, small); err != nil {
		t.Fatal(err)
	}
	got := 102 + exhaust(t, []*host{a, b})
	if got != small.Limits.MaxInvocations {
		t.Errorf("charged %d invocations over the crash, want exactly %d", got, small.Limits.MaxInvocations)
	}
	checkLedger(t, []*host{a, b}, small, small.Limits.MaxInvocations)
}

// exhaust calls on every host from 4 callers each until each is refused,
// returning how many were allowed.
func exhaust(t *testing.T, hosts []*host) uint64 {
	var n atomic.Uint64
	var wg sync.WaitGroup
	for i := 0; i < 4*len(hosts); i++ {
		wg.Add(1)
		go func(h *host) {
			defer wg.Done()
			for {
				hold, err := h.led.Reserve(ctx, budget.Request{Key: small.Key})
				if errors.Is(err, budget.ErrDenied) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
				if _, err := h.led.Reconcile(ctx, hold.ID, budget.Settle{Actual: usd(3)}); err != nil {
					t.Error(err)
					return
				}
			}
		}(hosts[i%len(hosts)])
	}
	wg.Wait()
	return n.Load()
}

func member(t *testing.T, cli *clientv3.Client, name string) Member {
	t.Helper()
	fl, err := ReadLedger(ctx, cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	r := fl[small.Key]
	if r == nil || r.Members[name] == nil {
		t.Fatalf("no fleet record of %s in %s", name, small.Key)
	}
	return *r.Members[name]
}

// runChild runs hostA's first life in a child process (this test binary)
// and kills it with SIGKILL once it reports its open hold.
func runChild(t *testing.T, dir string, endpoints []string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+dir+"|"+strings.Join(endpoints, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "open-hold "); ok {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return id
		}
	}
	_ = cmd.Wait()
	t.Fatal("the child host ended without reporting its open hold")
	return ""
}

// TestCrashChild is hostA's first life (only under TestCrashedHostResumesItsBlock).
func TestCrashChild(t *testing.T) {
	env := os.Getenv(childEnv)
	if env == "" {
		t.Skip("the child process of TestCrashedHostResumesItsBlock")
	}
	dir, eps, _ := strings.Cut(env, "|")
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ",")})
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, "hostA", dir)
	h.open(t, cli, WithIdle(0), WithBlock(256))
	if err := h.led.Define(ctx, small); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		hold, err := h.led.Reserve(ctx, budget.Request{Key: small.Key})
		if err == nil {
			_, err = h.led.Reconcile(ctx, hold.ID, budget.Settle{Actual: usd(4)})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	hold, err := h.led.Reserve(ctx, budget.Request{Key: small.Key})
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("open-hold " + hold.ID + "\n")
	select {} // killed here
}
