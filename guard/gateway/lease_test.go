package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

const leaseManifest = `apiVersion: klock/v1
agent: {id: tools-agent}
workdir: /srv/repo
intents: []
hitl: {default_mode: HOTL}
declared_tools:
  - {name: opaque_write, blast_radius: local, side_effects: REVERSIBLE-WRITE, rollback: {mechanism: undo}, idempotency: {mode: natural}, autonomy: {unsupervised: always}}
  - {name: db_write, blast_radius: local, side_effects: REVERSIBLE-WRITE, rollback: {mechanism: undo}, idempotency: {mode: natural}, autonomy: {unsupervised: always}, touches: ["MUTATES FILE:${workdir}/db/**"]}
  - {name: lookup, blast_radius: read, side_effects: READ}
  - {name: slow_write, blast_radius: local, side_effects: REVERSIBLE-WRITE, rollback: {mechanism: undo}, idempotency: {mode: natural}, autonomy: {unsupervised: always}, timeout_ms: 50, touches: ["MUTATES FILE:${workdir}/db/**"]}
  - {name: saas, blast_radius: domain, side_effects: REVERSIBLE-WRITE, rollback: {mechanism: undo}, idempotency: {mode: natural}, autonomy: {unsupervised: always}, touches: []}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`

func leaseGateway(t *testing.T, store lease.Store) *Gateway {
	t.Helper()
	m, err := policy.Parse("tools.yaml", []byte(leaseManifest))
	if err != nil {
		t.Fatal(err)
	}
	g, st, err := Open(m, Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil, WithLeases(store))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return g
}

func hold(t *testing.T, tb *lease.Table, h lease.Holder, intent string) {
	t.Helper()
	in, err := policy.ParseIntent(intent)
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := lease.FromIntent(in)
	if d, err := tb.Acquire(context.Background(), lease.Request{Holder: h, Claims: []lease.Claim{c}}); err != nil || d.Outcome != lease.Granted {
		t.Fatalf("hold %s: %+v %v", intent, d, err)
	}
}

func held(t *testing.T, tb *lease.Table) []lease.Lease {
	t.Helper()
	ls, err := tb.List(context.Background(), lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// A tool call holds leases on what its contract touches for its duration:
// refused while an agent session holds that scope (naming it), dispatched
// once the session released it, and its leases released when it ends,
// whether the tool answered, failed, timed out or panicked.
func TestToolCallsLease(t *testing.T) {
	ctx := context.Background()
	tb := lease.NewTable()
	g := leaseGateway(t, tb)
	coder := lease.Holder{Agent: "coder-01", Session: "s-coder"}
	hold(t, tb, coder, "MUTATES FILE:/srv/repo/db/users/**")

	dispatched := 0
	var during []lease.Lease
	ok := func(context.Context) (Outcome, error) {
		dispatched++
		during = held(t, tb)
		return Outcome{Result: json.RawMessage(`{"ok":true}`)}, nil
	}
	call := func(tool string) *check.Call { return &check.Call{Tool: tool, Args: map[string]any{}, RunID: "r"} }

	for _, tool := range []string{"db_write", "opaque_write", "lookup"} {
		_, te := g.Call(ctx, call(tool), ok)
		if te == nil || te.Class != toolerr.Restricted || te.Reason != ReasonLeaseConflict || !te.Retryable || te.Check != "lease" {
			t.Fatalf("%s while the session holds its scope: %+v", tool, te)
		}
		for _, want := range []string{"s-coder", "coder-01", "MUTATES FILE:/srv/repo/db/users/**"} {
			if !strings.Contains(te.Message, want) {
				t.Errorf("%s: refusal %q does not name %s", tool, te.Message, want)
			}
		}
	}
	if dispatched != 0 {
		t.Fatalf("a refused call was dispatched %d times", dispatched)
	}
	// touches: [] — an external API touches nothing here.
	if _, te := g.Call(ctx, call("saas"), ok); te != nil || len(during) != 1 {
		t.Fatalf("saas: %v, leases during the call %+v (want the session's only)", te, during)
	}

	if n, _ := tb.Release(ctx, coder); n != 1 {
		t.Fatal("session release")
	}
	for tool, want := range map[string]string{
		"db_write":     "MUTATES FILE:/srv/repo/db/**",
		"opaque_write": "MUTATES FILE:/srv/repo/**",
		"lookup":       "CONSUMES FILE:/srv/repo/**",
	} {
		during = nil
		if _, te := g.Call(ctx, call(tool), ok); te != nil {
			t.Fatalf("%s after the release: %v", tool, te)
		}
		if len(during) != 1 || during[0].Predicate.String()+" "+during[0].Object != want ||
			during[0].Holder.Agent != "tools-agent" || !strings.HasPrefix(during[0].Holder.Session, "tool:"+tool+":call_") {
			t.Fatalf("%s held %+v during the call, want %s as tool:%s:<call id>", tool, during, want, tool)
		}
		if ls := held(t, tb); len(ls) != 0 {
			t.Fatalf("%s: leases left after the call: %+v", tool, ls)
		}
	}
	// While a call runs, an agent session cannot take its scope.
	var sessionTried lease.Decision
	_, _ = g.Call(ctx, call("db_write"), func(context.Context) (Outcome, error) {
		in, _ := policy.ParseIntent("MUTATES FILE:/srv/repo/db/x")
		c, _, _ := lease.FromIntent(in)
		sessionTried, _ = tb.Acquire(ctx, lease.Request{Holder: coder, Claims: []lease.Claim{c}})
		return Outcome{}, nil
	})
	if sessionTried.Outcome == lease.Granted {
		t.Fatal("a session was granted what a running tool call holds")
	}

	// The tool fails, or panics: released all the same.
	if _, te := g.Call(ctx, call("db_write"), func(context.Context) (Outcome, error) { return Outcome{}, errors.New("boom") }); te == nil {
		t.Fatal("failing tool: no error")
	}
	if ls := held(t, tb); len(ls) != 0 {
		t.Fatalf("leases left after a failed call: %+v", ls)
	}
	if _, te := g.Call(ctx, call("slow_write"), func(ctx context.Context) (Outcome, error) { <-ctx.Done(); return Outcome{}, ctx.Err() }); te == nil || te.Class != toolerr.Timeout {
		t.Fatalf("slow tool: %+v, want a timeout", te)
	}
	if ls := held(t, tb); len(ls) != 0 {
		t.Fatalf("leases left after a call that timed out: %+v", ls)
	}
	func() {
		defer func() { _ = recover() }()
		g.Call(ctx, call("db_write"), func(context.Context) (Outcome, error) { panic("tool bug") })
	}()
	if ls := held(t, tb); len(ls) != 0 {
		t.Fatalf("leases left after a panicking call: %+v", ls)
	}
}

// Two calls of one gateway that change the same files: with LeaseWait the
// second waits for the first instead of failing.
func TestToolCallWaitsForAnother(t *testing.T) {
	ctx := context.Background()
	tb := lease.NewTable()
	m, err := policy.Parse("tools.yaml", []byte(leaseManifest))
	if err != nil {
		t.Fatal(err)
	}
	g, st, err := Open(m, Layout{Dir: t.TempDir(), Agent: m.Agent.ID}, "", nil, WithLeases(tb, LeaseWait(10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	inFirst, release := make(chan struct{}), make(chan struct{})
	first := make(chan *toolerr.Error)
	go func() {
		_, te := g.Call(ctx, &check.Call{Tool: "db_write", Args: map[string]any{}, RunID: "r"}, func(context.Context) (Outcome, error) {
			close(inFirst)
			<-release
			return Outcome{}, nil
		})
		first <- te
	}()
	<-inFirst
	second := make(chan *toolerr.Error)
	overlapped := make(chan bool, 1)
	go func() {
		_, te := g.Call(ctx, &check.Call{Tool: "db_write", Args: map[string]any{}, RunID: "r"}, func(context.Context) (Outcome, error) {
			select {
			case <-release:
				overlapped <- false
			default:
				overlapped <- true // dispatched while the first still ran
			}
			return Outcome{}, nil
		})
		second <- te
	}()
	// Time for a second call that does not wait to be dispatched.
	<-time.After(200 * time.Millisecond)
	close(release)
	if te := <-first; te != nil {
		t.Fatal(te)
	}
	if te := <-second; te != nil {
		t.Fatalf("the second call after the first ended: %v", te)
	}
	if <-overlapped {
		t.Fatal("the second call ran while the first held its leases")
	}
}

// The calls of a run act for the session that leads the run's group
// (klock run --gateway-run): they do not conflict with its leases; a call
// of another run still does.
func TestToolCallsActForTheirRunsSession(t *testing.T) {
	ctx := context.Background()
	tb := lease.NewTable()
	g := leaseGateway(t, tb)
	session := lease.Holder{Tenant: fmt.Sprintf("uid:%d", os.Geteuid()), Agent: "tools-agent", Session: "s-1", Group: "run:r", Lead: true}
	hold(t, tb, session, "MUTATES FILE:/srv/repo/db/**")
	ok := func(context.Context) (Outcome, error) { return Outcome{Result: json.RawMessage(`{"ok":true}`)}, nil }
	if _, te := g.Call(ctx, &check.Call{Tool: "db_write", Args: map[string]any{}, RunID: "r"}, ok); te != nil {
		t.Fatalf("a call of the session's own run: %+v", te)
	}
	if _, te := g.Call(ctx, &check.Call{Tool: "db_write", Args: map[string]any{}, RunID: "other"}, ok); te == nil || te.Reason != ReasonLeaseConflict {
		t.Fatalf("a call of another run: %+v, want a lease conflict", te)
	}
}
