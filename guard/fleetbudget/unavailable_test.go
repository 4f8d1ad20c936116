package fleetbudget

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/internal/etcdtest"
)

// TestLosingEtcdFailsClosed: with every etcd member stopped (SIGSTOP) the
// host's block still serves; the call that needs a new block is refused
// with ErrUnavailable (and budget.ErrLedger) saying what fixes it; once
// etcd is back, calls go through again. A grant defined with other limits
// on another host is refused.
func TestLosingEtcdFailsClosed(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := c.Client(t)
	a := newHost(t, "hostA", "")
	a.open(t, cli, WithBlock(10), WithTimeout(300*time.Millisecond), WithIdle(0))
	if err := a.led.Define(ctx, small); err != nil {
		t.Fatal(err)
	}
	reserve := func() error {
		h, err := a.led.Reserve(ctx, budget.Request{Key: small.Key})
		if err == nil {
			_, err = a.led.Reconcile(ctx, h.ID, budget.Settle{Actual: usd(5)})
		}
		return err
	}
	if err := reserve(); err != nil { // takes a block of 10
		t.Fatal(err)
	}
	for _, m := range c.Members {
		m.Pause()
	}
	for i := 1; i < 10; i++ {
		if err := reserve(); err != nil {
			t.Fatalf("call %d within the block, etcd stopped: %v", i+1, err)
		}
	}
	err := reserve()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, budget.ErrLedger) || !strings.Contains(err.Error(), "quorum") {
		t.Fatalf("a call past the block with etcd stopped: %v", err)
	}
	for _, m := range c.Members {
		m.Resume()
	}
	waitFor(t, "etcd to answer again", func() bool { return reserve() == nil })

	b := newHost(t, "hostB", "")
	b.open(t, cli)
	other := small
	other.Limits.MaxInvocations = 601
	if err := b.led.Define(ctx, other); !errors.Is(err, ErrGrantChanged) || !errors.Is(err, budget.ErrGrantChanged) {
		t.Fatalf("a grant with other limits than the fleet's: %v", err)
	}
	a.close(t)
	b.close(t)
}

// TestBlockShrinksWithTheRemainder: blocks are at most the remainder
// shared among twice the members, at least what the call needs.
func TestBlockShrinksWithTheRemainder(t *testing.T) {
	for _, tc := range []struct {
		rem, need, headroom, target uint64
		members                     int
		want                        uint64
	}{
		{10_000, 1, 0, 256, 2, 256},  // plenty left: a full block
		{400, 1, 0, 256, 2, 100},     // a quarter of what is left
		{3, 1, 0, 256, 2, 1},         // nearly out: what the call needs
		{3, 5, 0, 256, 2, 3},         // capped at the remainder (the caller refuses)
		{10_000, 1, 200, 256, 1, 56}, // tops the headroom up to a block
	} {
		if got := blockOf(tc.rem, tc.need, tc.headroom, tc.target, tc.members); got != tc.want {
			t.Errorf("blockOf(%+v) = %d, want %d", tc, got, tc.want)
		}
	}
}
