//go:build linux

package leaseapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// sseKeepalive is how often an idle event stream sends a comment, so that
// proxies and clients see it alive.
const sseKeepalive = 15 * time.Second

// eventView is e as id may see it: its own tenant's grants and frees, and
// contention as contentionView shows it.
func eventView(e *lease.Event, id Identity, now time.Time) (Event, bool) {
	ev := Event{Type: string(e.Type), Time: e.Time}
	switch e.Type {
	case lease.LeaseGranted, lease.LeaseFreed:
		if !visible(id, &e.Lease) {
			return ev, false
		}
		v := view(&e.Lease, now)
		ev.Lease = &v
	case lease.ContentionDetected:
		c, ok := contentionView(e, 1, id, now)
		if !ok {
			return ev, false
		}
		ev.Contention = &c
	default:
		return ev, false
	}
	return ev, true
}

// streamEvents is GET /v1/events: server-sent events from the moment the
// response's headers are sent (the stream opens with a comment line) until
// the caller or the server goes away. A client that does not keep up loses
// events rather than slowing the store; "id:" numbers the events this
// stream sent.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id Identity) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, newError(ClassInternal, "this connection cannot stream"))
		return
	}
	if !s.streams.take(id.Tenant, maxStreams) {
		e := newError(ClassRateLimited, "tenant %s has %d event streams open already; close one", id.Tenant, maxStreams)
		e.RetryAfterMS = 1000
		writeError(w, e)
		return
	}
	defer s.streams.release(id.Tenant)
	ch, unsub := s.events.Subscribe(1024)
	defer unsub()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, ": klock lease events for tenant %s\n\n", id.Tenant)
	fl.Flush()
	tick := time.NewTicker(sseKeepalive)
	defer tick.Stop()
	var n uint64
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case e, ok := <-ch:
			if !ok {
				return
			}
			ev, ok := eventView(&e, id, time.Now())
			if !ok {
				continue
			}
			b, err := json.Marshal(ev)
			if err != nil {
				continue
			}
			n++
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", n, ev.Type, b); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
