package lease

import "context"

type holderKey struct{}

// ContextWithHolder says, to what runs under ctx, that it acts for h: a
// tool call's holder, under which the session that runs the tool's
// plugin takes its leases (the call's, released with them).
func ContextWithHolder(ctx context.Context, h Holder) context.Context {
	return context.WithValue(ctx, holderKey{}, h)
}

// HolderFromContext is the holder ContextWithHolder put in ctx.
func HolderFromContext(ctx context.Context) (Holder, bool) {
	h, ok := ctx.Value(holderKey{}).(Holder)
	return h, ok
}
