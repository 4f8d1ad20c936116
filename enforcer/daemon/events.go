//go:build linux

package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/eventlog"
)

// EventsRequest asks for klockd's event records (klock events).
type EventsRequest struct {
	// Session keeps one session's records ("" all).
	Session string `json:"session,omitempty"`
	// Since replays the records klockd still holds from this time on
	// (eventlog.DefaultBacklog of them at most) before the live ones.
	Since time.Time `json:"since,omitzero"`
	// All adds every observed triple (eventlog.KindObserved).
	All bool `json:"all,omitempty"`
	// Follow keeps the stream open for new records; without it the
	// stream ends after what Since replays.
	Follow bool `json:"follow,omitempty"`
}

// eventsRing is how many records a klock events reader may fall behind
// before it loses some; the events file's is larger (a disk stalls longer
// than a terminal).
const (
	eventsRing     = eventlog.DefaultRing
	eventsFileRing = 16 * eventlog.DefaultRing
)

// startEvents makes the hub (unless Config.Events), tees it with
// Config.EventSinks, and starts the events file's writer.
func (s *Server) startEvents() {
	s.events = s.cfg.Events
	if s.events == nil {
		s.events = eventlog.NewHub("klockd", 0)
	}
	s.sink = eventlog.Tee(append([]eventlog.Sink{s.events}, s.cfg.EventSinks...)...)
	// Lease decisions are records too, whoever asked (a session, the
	// lease API).
	s.leases = eventlog.Leases(s.leases, s.sink)
	if f := s.cfg.EventsFile; f != nil {
		s.eventsFile = s.events.Subscribe(eventlog.Filter{}, true, eventsFileRing)
		s.eventsDone = make(chan struct{})
		go func() {
			defer close(s.eventsDone)
			f.Run(context.Background(), s.eventsFile, func(err error) { s.log.Warn("events file", "error", err) })
		}()
	}
}

// stopEvents, once the sessions have ended, ends the events file's reader
// and waits for the file to write what it holds.
func (s *Server) stopEvents() {
	if s.eventsFile == nil {
		return
	}
	s.eventsFile.Close()
	<-s.eventsDone
}

// Events is the hub of klockd's event records.
func (s *Server) Events() *eventlog.Hub { return s.events }

// sessionEvents is where a session of uid's records go: stamped with
// its owner, so that a reader who is not root gets its own only.
func (s *Server) sessionEvents(uid uint32) eventlog.Sink {
	return eventlog.With(s.sink, eventlog.Record{Owner: fmt.Sprintf("uid:%d", uid)})
}

// streamEvents serves klock events: the records req selects (a peer that
// is not root: its own sessions' and leases' only), one frame each, until
// the client goes away or klockd shuts down. A client that reads too
// slowly loses records and gets a KindLost record saying how many: it
// never slows a session.
func (s *Server) streamEvents(w *connWriter, peer Peer, req *EventsRequest) {
	if req == nil {
		req = &EventsRequest{}
	}
	f := eventlog.Filter{Session: req.Session, Since: req.Since, All: req.All}
	if peer.UID != 0 {
		f.Owner = fmt.Sprintf("uid:%d", peer.UID)
	}
	rd := s.events.Subscribe(f, req.Follow, eventsRing)
	defer rd.Close()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// The client sends nothing more: a read that returns is its going
	// away, which ends the stream.
	go func() {
		var b [1]byte
		_, _ = w.c.Read(b[:])
		cancel()
	}()
	for {
		r, err := rd.Next(ctx)
		if err != nil {
			if ctx.Err() == nil || s.ctx.Err() != nil {
				_ = w.send(msg(wire.Message{Type: typeEventsEnd}))
			}
			return
		}
		if err := w.send(&message{Message: wire.Message{Type: typeEvent}, Event: &r}); err != nil {
			return
		}
	}
}

// Events streams klockd's event records that req selects to fn, until
// the stream ends (req without Follow: after the backlog), ctx ends (nil
// then), fn returns an error (returned), or klockd goes away.
func (cl *Client) Events(ctx context.Context, req EventsRequest, fn func(eventlog.Record) error) error {
	c, err := cl.conn()
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := writeFrame(c, &message{Message: wire.Message{Type: typeEvents, V: ProtocolVersion}, Events: &req}); err != nil {
		return refusal(c, fmt.Errorf("klockd: send: %w", err))
	}
	for {
		m, fs, err := readFrame(c, maxReplyFrame)
		closeAll(fs)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("klockd: events: %w", err)
		case m.Type == typeError && m.Error != nil:
			return m.Error
		case m.Type == typeEventsEnd:
			return nil
		case m.Type == typeEvent && m.Event != nil:
			if err := fn(*m.Event); err != nil {
				return err
			}
		}
	}
}
