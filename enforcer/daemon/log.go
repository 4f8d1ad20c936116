package daemon

import (
	"context"
	"log/slog"
	"sync"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
)

// forwarder sends a session's log records to its client without ever
// blocking the session's event loop: records queue in a bounded buffer that
// a goroutine writes out; when a slow client lets it fill, records are
// dropped and counted (the daemon's own log keeps them all).
type forwarder struct {
	w       *connWriter
	ch      chan *LogEvent
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	closed  bool
	dropped int
}

func newForwarder(w *connWriter) *forwarder {
	f := &forwarder{w: w, ch: make(chan *LogEvent, 256), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for ev := range f.ch {
			_ = f.w.send(msg(wire.Message{Type: typeLog, Log: ev}))
		}
	}()
	return f
}

func (f *forwarder) push(ev *LogEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	select {
	case f.ch <- ev:
	default:
		f.dropped++
	}
}

// close flushes what is queued; idempotent.
func (f *forwarder) close() {
	f.once.Do(func() {
		f.mu.Lock()
		f.closed = true
		close(f.ch)
		f.mu.Unlock()
		<-f.done
	})
}

// newLogger logs to the daemon's handler and forwards Info and above to
// the client.
func newLogger(daemon slog.Handler, f *forwarder) *slog.Logger {
	return slog.New(&teeHandler{daemon: daemon, f: f})
}

type teeHandler struct {
	daemon slog.Handler
	f      *forwarder
	attrs  []slog.Attr
	group  string
}

func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.daemon.Enabled(ctx, l)
}

func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.daemon.Enabled(ctx, r.Level) {
		_ = h.daemon.Handle(ctx, r.Clone())
	}
	if r.Level < slog.LevelInfo {
		return nil
	}
	ev := &LogEvent{Time: r.Time, Level: r.Level, Message: r.Message}
	add := func(a slog.Attr) {
		if ev.Attrs == nil {
			ev.Attrs = map[string]string{}
		}
		k := a.Key
		if h.group != "" {
			k = h.group + "." + k
		}
		ev.Attrs[k] = a.Value.Resolve().String()
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	h.f.push(ev)
	return nil
}

func (h *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.daemon = h.daemon.WithAttrs(as)
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *teeHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.daemon = h.daemon.WithGroup(name)
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
