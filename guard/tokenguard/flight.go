package tokenguard

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/klocklabs/klock/policy/money"
)

// Usage is what a running invocation has consumed so far (cumulative).
type Usage struct {
	TokensIn, TokensOut, LatencyMS int64
	Cost                           *money.Amount
}

// Flight watches one running invocation. Report usage as it grows; the
// first report that crosses a hard limit cancels the invocation's context
// (cause ErrHardLimit) and returns the error, so the caller stops the
// stream or the tool right there.
type Flight struct {
	g      *Guard
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	err    error
}

// Start begins watching an invocation; run it under the returned context.
func (g *Guard) Start(ctx context.Context) (*Flight, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &Flight{g: g, cancel: cancel}, ctx
}

// Observe reports cumulative usage. It returns ErrHardLimit (wrapped, with
// the limits) once any max is crossed, and keeps returning it.
func (f *Flight) Observe(u Usage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	over, _ := f.g.limits(u.TokensIn, u.TokensOut, u.LatencyMS, u.Cost)
	if len(over) > 0 {
		f.err = fmt.Errorf("%w: %s", ErrHardLimit, strings.Join(over, "; "))
		f.cancel(f.err)
	}
	return f.err
}

// End releases the flight's context.
func (f *Flight) End() { f.cancel(nil) }
