package logswitch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// Format is how records are written.
type Format string

// Formats.
const (
	Text Format = "text"
	JSON Format = "json"
)

// Sentinel errors.
var (
	ErrFormat = errors.New("log format must be text or json")
	ErrLevel  = errors.New("log level must be debug, info, warn or error")
)

// ParseFormat reads "text" or "json".
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case Text, JSON:
		return f, nil
	}
	return "", fmt.Errorf("%w: %q", ErrFormat, s)
}

// ParseLevel reads debug, info, warn or error (slog's names).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%w: %q", ErrLevel, s)
	}
	return l, nil
}

// Switch is the root handler; Set changes its format and level.
type Switch struct {
	w     io.Writer
	level slog.LevelVar
	// gen counts Sets, so a derived handler knows when to rebuild.
	gen atomic.Uint64
	mu  sync.Mutex
	cur slog.Handler
}

// New writes to w in format, from level up.
func New(w io.Writer, f Format, l slog.Level) *Switch {
	s := &Switch{w: w}
	s.Set(f, l)
	return s
}

// Set changes the format and level of every logger made from s.
func (s *Switch) Set(f Format, l slog.Level) {
	s.level.Set(l)
	o := &slog.HandlerOptions{Level: &s.level}
	var h slog.Handler = slog.NewTextHandler(s.w, o)
	if f == JSON {
		h = slog.NewJSONHandler(s.w, o)
	}
	s.mu.Lock()
	s.cur = h
	s.gen.Add(1)
	s.mu.Unlock()
}

// Handler is the handler to give slog.New.
func (s *Switch) Handler() slog.Handler { return &handler{root: s} }

func (s *Switch) current() (slog.Handler, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.gen.Load()
}

// op is one With or WithGroup, replayed on the current handler.
type op struct {
	attrs []slog.Attr
	group string
}

// handler replays its ops on the root's current handler, caching the
// result until the next Set.
type handler struct {
	root *Switch
	ops  []op
	mu   sync.Mutex
	gen  uint64
	h    slog.Handler
}

func (h *handler) resolve() slog.Handler {
	if h.root.gen.Load() == h.gen && h.h != nil {
		return h.h
	}
	cur, gen := h.root.current()
	for _, o := range h.ops {
		if o.group != "" {
			cur = cur.WithGroup(o.group)
		} else {
			cur = cur.WithAttrs(o.attrs)
		}
	}
	h.h, h.gen = cur, gen
	return cur
}

func (h *handler) get() slog.Handler {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.resolve()
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.root.level.Level()
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	return h.get().Handle(ctx, r)
}

func (h *handler) with(o op) *handler {
	ops := append(append([]op(nil), h.ops...), o)
	return &handler{root: h.root, ops: ops}
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	return h.with(op{attrs: as})
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(op{group: name})
}
