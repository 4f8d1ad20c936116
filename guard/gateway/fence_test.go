package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/enforcer/lease/etcdstore"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// pausingCharger stands for whatever holds a call between its leases and
// its dispatch (a budget fsync, a block taken from the fleet, a process
// stopped by SIGSTOP): Reserve returns only when the test says so.
type pausingCharger struct {
	paused   chan struct{} // closed when a Reserve is under way
	resume   chan struct{}
	released []string
}

func (p *pausingCharger) Reserve(ctx context.Context, call *check.Call, d *check.Decision) (check.Reservation, error) {
	close(p.paused)
	<-p.resume
	return "hold-1", nil
}

func (p *pausingCharger) Reconcile(context.Context, check.Reservation, check.Usage) (*check.Charged, error) {
	return nil, nil
}

func (p *pausingCharger) Release(_ context.Context, r check.Reservation, _ string) error {
	p.released = append(p.released, r.(string))
	return nil
}

// A gateway that took a call's leases on a fleet store and was then held
// up past its lease (its etcd lease ended, and another host was granted
// the scope) must not dispatch the call when it resumes: the grant's
// fencing token is checked at dispatch and the call is refused
// (lease_lost), its reservation released.
func TestStaleFenceRefusesDispatch(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := etcdtest.Start(t, 3)
	cli := c.Client(t)
	a := etcdstore.New(cli, "/fence", "hostA")
	b := etcdstore.New(c.Client(t), "/fence", "hostB")
	t.Cleanup(func() { a.Close(); b.Close() })

	m, err := policy.Parse("tools.yaml", []byte(leaseManifest))
	if err != nil {
		t.Fatal(err)
	}
	ch := &pausingCharger{paused: make(chan struct{}), resume: make(chan struct{})}
	g, st, err := Open(m, Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil, WithLeases(a), WithCharger(ch))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	dispatched := false
	type result struct{ te *toolerr.Error }
	done := make(chan result, 1)
	go func() {
		_, te := g.Call(context.Background(), &check.Call{Tool: "db_write", Args: map[string]any{}, RunID: "r"},
			func(context.Context) (Outcome, error) {
				dispatched = true
				return Outcome{Result: json.RawMessage(`{}`)}, nil
			})
		done <- result{te}
	}()
	<-ch.paused

	// While the gateway is held up, its holder's etcd lease ends (what
	// etcd does when a paused host stops renewing past the TTL) and host
	// B is granted the same scope.
	ctx := context.Background()
	ls, err := b.List(ctx, lease.Filter{})
	if err != nil || len(ls) != 1 || ls[0].Fence == 0 {
		t.Fatalf("the call's lease on etcd: %+v %v", ls, err)
	}
	expireHolderLease(t, cli, "/fence/lease/")
	in, _ := policy.ParseIntent("MUTATES FILE:/srv/repo/db/**")
	cl, _, _ := lease.FromIntent(in)
	d, err := b.Acquire(ctx, lease.Request{Holder: lease.Holder{Agent: "other", Session: "s-b"}, Claims: []lease.Claim{cl}})
	if err != nil || d.Outcome != lease.Granted {
		t.Fatalf("host B after the expiry: %+v %v", d, err)
	}

	close(ch.resume)
	r := <-done
	if dispatched {
		t.Fatal("the call was dispatched on a lease another host now holds")
	}
	if r.te == nil || r.te.Reason != ReasonLeaseLost || r.te.Check != "lease" || !r.te.Retryable ||
		!strings.Contains(r.te.Message, "fencing token") {
		t.Fatalf("refusal: %+v", r.te)
	}
	if len(ch.released) != 1 {
		t.Fatalf("the reservation was not released: %v", ch.released)
	}
}

// expireHolderLease revokes the etcd lease the one lease key under prefix
// is bound to, as etcd expires it when its holder stops renewing.
func expireHolderLease(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease == 0 {
		t.Fatalf("lease keys under %s: %v %v", prefix, r, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}
