package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/approval/etcdqueue"
	"github.com/klocklabs/klock/internal/etcdtest"
)

// TestFleetQueueUnreachableRefuses: a gateway whose approval queue is a
// fleet's on etcd, with the cluster gone, refuses a call that needs a
// human with a typed, retryable approval_unreachable; the tool never runs.
func TestFleetQueueUnreachableRefuses(t *testing.T) {
	m := refundManifest(t)
	c := etcdtest.Start(t, 3)
	q := etcdqueue.New(c.Client(t), "/gw", "host-a", etcdqueue.WithTimeout(time.Second))
	g, st, err := Open(m, Layout{Dir: t.TempDir(), Agent: m.Agent.ID, Queue: q}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c.Stop()
	big := refundCall()
	big.Args["amount_usd"] = 417.25
	ran := false
	dispatch := func(context.Context) (Outcome, error) {
		ran = true
		return Outcome{Result: json.RawMessage(`{"refund_id":"rf_2"}`)}, nil
	}
	_, te := g.CallWith(context.Background(), big, dispatch, transactions)
	if te == nil || ran {
		t.Fatalf("a call needing approval ran with the queue unreachable (ran %v)", ran)
	}
	if te.Reason != "approval_unreachable" || !te.Retryable || !strings.Contains(te.Message, "unreachable") {
		t.Fatalf("refusal: %+v", te)
	}
}
