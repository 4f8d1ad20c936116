package session

import (
	"log/slog"
	"sync"
	"time"
)

// timeline records how long each step of a session's start and end took,
// for the Debug log ("session start", "session end"): where a slow start
// goes (the backup, a backend's attach, the log's fsync, a helper process)
// is otherwise invisible to an operator, and to the container benchmark's
// breakdown. Steps run concurrently (the backup beside the backends) are
// marked by whoever finishes them; each mark is the time since the
// timeline began.
type timeline struct {
	mu    sync.Mutex
	t0    time.Time
	marks []any // slog attrs: name, duration since t0
}

func newTimeline() *timeline { return &timeline{t0: time.Now()} }

// mark records that step is done now. A nil timeline records nothing.
func (t *timeline) mark(step string) {
	if t == nil {
		return
	}
	d := time.Since(t.t0)
	t.mu.Lock()
	t.marks = append(t.marks, slog.Duration(step, d.Round(10*time.Microsecond)))
	t.mu.Unlock()
}

// log writes the marks at Debug level, then starts over.
func (t *timeline) log(log *slog.Logger, msg string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	marks := t.marks
	t.marks, t.t0 = nil, time.Now()
	t.mu.Unlock()
	log.Debug(msg, marks...)
}
