package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

func compileFor(t testing.TB, workdir string, intents ...string) (*policy.Manifest, *policy.Ruleset) {
	t.Helper()
	m, err := policy.Parse("m.yaml", []byte(testutil.ManifestYAML("coder", "strict", workdir, intents...)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, rs
}

// TestLeaseClaims: every intent that leases something is claimed once
// (manifest and baseline), PROC intents and kernel views are not, and the
// baseline's are known as such.
func TestLeaseClaims(t *testing.T) {
	_, rs := compileFor(t, "/srv/repo", "MUTATES FILE:${workdir}/src/**", "PROVIDES PROC:/usr/bin/git", "CONSUMES NET:api.example.com:443/tcp", "MUTATES FILE:/dev/null", "MUTATES FILE:${workdir}/src/**")
	claims, baseline := leaseClaims(rs)
	got := map[string]bool{}
	for _, c := range claims {
		k := c.Predicate.String() + " " + c.Resource.String()
		if got[k] {
			t.Errorf("%s claimed twice", k)
		}
		got[k] = true
	}
	for _, want := range []string{"MUTATES FILE:/srv/repo/src/**", "CONSUMES NET:api.example.com:443/tcp", "CONSUMES FILE:/usr/**", "CONSUMES FILE:/etc/hosts"} {
		if !got[want] {
			t.Errorf("no claim %s in %v", want, got)
		}
	}
	for k := range got {
		if strings.Contains(k, "PROC:") || strings.Contains(k, "FILE:/dev/") || strings.Contains(k, "FILE:/proc/") || strings.Contains(k, "FILE:/sys/") {
			t.Errorf("%s is claimed: nothing leases it", k)
		}
	}
	if !baseline["CONSUMES FILE:/usr/**"] || baseline["MUTATES FILE:/srv/repo/src/**"] {
		t.Errorf("baseline marks: %v", baseline)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestLeaseConflictSaysWhoAndWhat: a session refused for a lease another
// holds gets ErrLeaseConflict naming the lease (predicate and object), its
// holder's session and agent, its own conflicting intent, and the ways
// out; with a wait, it waits its time and says so.
func TestLeaseConflictSaysWhoAndWhat(t *testing.T) {
	tbl := lease.NewTable()
	m, rs := compileFor(t, "/srv/repo", "MUTATES FILE:${workdir}/**")
	first, err := acquireLeases(context.Background(), Options{Manifest: m, Leases: tbl}, rs, "s-first", quiet())
	if err != nil || first == nil {
		t.Fatal(err)
	}
	m2, rs2 := compileFor(t, "/srv/repo", "PROVIDES FILE:${workdir}/docs/**")
	m2.Agent.ID = "writer"
	_, err = acquireLeases(context.Background(), Options{Manifest: m2, Leases: tbl}, rs2, "s-second", quiet())
	var lc *LeaseConflictError
	if !errors.Is(err, ErrLeaseConflict) || !errors.As(err, &lc) || lc.Decision.Outcome != lease.Die {
		t.Fatalf("second: %v, want ErrLeaseConflict (DIE)", err)
	}
	for _, want := range []string{"session s-first (agent coder) holds MUTATES FILE:/srv/repo/**", "intent PROVIDES FILE:/srv/repo/docs/**", "--wait", "klock kill s-first", "klock leases", "younger"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, err)
		}
	}
	var progress strings.Builder
	start := time.Now()
	_, err = acquireLeases(context.Background(), Options{Manifest: m2, Leases: tbl, LeaseWait: 300 * time.Millisecond}, rs2, "s-second",
		slog.New(slog.NewTextHandler(&progress, nil)))
	if !errors.As(err, &lc) || time.Since(start) < 300*time.Millisecond || !strings.Contains(err.Error(), "(--wait 300ms)") {
		t.Fatalf("with --wait: %v after %s", err, time.Since(start))
	}
	if !strings.Contains(progress.String(), "waiting for session s-first (agent coder) holding MUTATES FILE:/srv/repo/**; retry in") {
		t.Errorf("no progress line:\n%s", progress.String())
	}
	first.release()
	if _, err := acquireLeases(context.Background(), Options{Manifest: m2, Leases: tbl}, rs2, "s-second", quiet()); err != nil {
		t.Fatalf("after the first released: %v", err)
	}
}

// TestLeasesLostEndTheSession: a revoked lease (even one of many) and
// leases that expired are reported, once, with how they ended; the log
// then lists them so.
func TestLeasesLostEndTheSession(t *testing.T) {
	for _, c := range []struct {
		name string
		lose func(tbl *lease.Table, l *leasing)
		want string
		end  string
	}{
		{"revoked", func(tbl *lease.Table, l *leasing) { tbl.Revoke(context.Background(), l.held[0].ID) }, "revoked (klock kill", "Revoked"},
		{"expired", func(tbl *lease.Table, l *leasing) {}, "expired (not heartbeated", "Expired"},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now()
			clock := func() time.Time { return now }
			tbl := lease.NewTable(lease.WithClock(func() time.Time { return clock() }))
			m, rs := compileFor(t, "/srv/repo", "MUTATES FILE:${workdir}/**")
			l, err := acquireLeases(context.Background(), Options{Manifest: m, Leases: tbl, LeaseTTL: 30 * time.Millisecond, LeaseGrace: time.Millisecond}, rs, "s-1", quiet())
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "expired" {
				clock = func() time.Time { return now.Add(time.Hour) } // heartbeats come too late
			}
			lost := make(chan error, 2)
			l.keepAlive(func(err error) { lost <- err })
			defer l.release()
			c.lose(tbl, l)
			select {
			case err := <-lost:
				if !strings.Contains(err.Error(), "leases revoked") || !strings.Contains(err.Error(), c.want) {
					t.Errorf("lost: %v, want it to say %q", err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the loss was not noticed")
			}
			held, _ := l.vlog()
			ended := 0
			for _, h := range held {
				if h.End == c.end {
					ended++
				}
			}
			if ended == 0 {
				t.Errorf("the log lists no %s lease: %+v", c.end, held)
			}
		})
	}
}

// TestLeaveRegions: a rollback leaves the changing FILE leases of other
// holders held since this session's grant (live or ended since), not its
// own, not reads, not NET, not what ended before.
func TestLeaveRegions(t *testing.T) {
	tbl := lease.NewTable()
	ctx := context.Background()
	acq := func(session string, intents ...string) {
		t.Helper()
		var claims []lease.Claim
		for _, s := range intents {
			in, err := policy.ParseIntent(s)
			if err != nil {
				t.Fatal(err)
			}
			c, _, _ := lease.FromIntent(in)
			claims = append(claims, c)
		}
		if d, err := tbl.Acquire(ctx, lease.Request{Holder: lease.Holder{Agent: "a-" + session, Session: session}, Claims: claims}); err != nil || d.Outcome != lease.Granted {
			t.Fatalf("%s: %v %+v", session, err, d)
		}
	}
	acq("before", "MUTATES FILE:/w/old/**")
	tbl.Release(ctx, lease.Holder{Agent: "a-before", Session: "before"})
	time.Sleep(2 * time.Millisecond)
	m, rs := compileFor(t, "/w", "MUTATES FILE:/w/mine/**")
	me, err := acquireLeases(ctx, Options{Manifest: m, Leases: tbl}, rs, "me", quiet())
	if err != nil {
		t.Fatal(err)
	}
	acq("live", "MUTATES FILE:/w/live/**", "CONSUMES FILE:/w/other/**", "PROVIDES NET:127.0.0.1:8080/tcp")
	acq("ended", "PROVIDES FILE:/w/ended/*")
	tbl.Release(ctx, lease.Holder{Agent: "a-ended", Session: "ended"})
	regions, err := me.leaveRegions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range regions {
		got[r.Pattern.String()] = r.Why
	}
	if len(got) != 2 || !strings.Contains(got["/w/live/**"], "session live (agent a-live) holds MUTATES FILE:/w/live/**") ||
		!strings.Contains(got["/w/ended/*"], "session ended (agent a-ended) held until") {
		t.Fatalf("regions %v", got)
	}
	if ex := me.excludeFromBackup(ctx); len(ex) != 1 || ex[0] != "/w/live" {
		t.Errorf("excluded from the backup: %v, want the live subtree alone", ex)
	}
}

func TestTouchedBy(t *testing.T) {
	paths := []string{"/w/b/y", "/w/c"}
	for p, want := range map[string]bool{"/w/b/y": true, "/w/b": true, "/w/c/new": true, "/w/b/yy": false, "/w/d": false} {
		if touchedBy(p, paths) != want {
			t.Errorf("touchedBy(%s) = %v", p, !want)
		}
	}
}

// BenchmarkSessionLeases: what leasing adds to a session's start and end:
// the claims of a manifest with the system-ro baseline (33 leases),
// acquired and released on a table where 100 other sessions hold theirs
// (one workdir subtree each, and the baseline's reads).
func BenchmarkSessionLeases(b *testing.B) {
	tbl := lease.NewTable()
	ctx := context.Background()
	for i := range 100 {
		m, rs := compileFor(b, "/srv/w", "MUTATES FILE:${workdir}/d"+strconv.Itoa(i)+"/**")
		if _, err := acquireLeases(ctx, Options{Manifest: m, Leases: tbl}, rs, "other-"+strconv.Itoa(i), quiet()); err != nil {
			b.Fatal(err)
		}
	}
	m, rs := compileFor(b, "/srv/w", "MUTATES FILE:${workdir}/mine/**", "PROVIDES FILE:${workdir}/mine/**")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := acquireLeases(ctx, Options{Manifest: m, Leases: tbl}, rs, "me", quiet())
		if err != nil {
			b.Fatal(err)
		}
		l.release()
	}
}
