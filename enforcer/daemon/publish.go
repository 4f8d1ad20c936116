//go:build linux

package daemon

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"golang.org/x/time/rate"
)

// A peer's published records: at most publishRate a second (burst as
// many), each frame at most maxPublishFrame bytes. A peer that publishes
// faster loses its records, not klockd's readers theirs.
const (
	publishRate     = 1000
	maxPublishFrame = 64 << 10
)

// publish serves a publish connection: a tool gateway (klock mcp, klock
// tools serve) sends its records, one {"type":"publish","event":{...}}
// frame each, until it goes away. Only the gateways' kinds are taken
// (eventlog.Guard): a peer cannot report a session's violation or
// rollback. Each is labelled with the peer's uid (source "peer uid:N",
// owner "uid:N"), whatever it claims, so that it cannot pass as klockd's.
func (s *Server) publish(c *net.UnixConn, peer Peer, first *message) {
	label := fmt.Sprintf("uid:%d", peer.UID)
	lim := rate.NewLimiter(publishRate, publishRate)
	dropped := 0
	m := first
	for {
		if r := m.Event; r != nil && eventlog.Guard(r.Kind) {
			if lim.Allow() {
				r.Source, r.Owner, r.Seq = "peer "+label, label, 0
				s.sink.Publish(*r)
			} else {
				dropped++
			}
		}
		var fs []*os.File
		var err error
		m, fs, err = readFrame(c, maxPublishFrame)
		closeAll(fs)
		if err != nil {
			break
		}
	}
	if dropped > 0 {
		s.log.Warn("a gateway published records faster than klockd takes them", "peer", peer.String(), "dropped", dropped)
	}
}

// Publisher sends a tool gateway's records to klockd (the publish
// request), never blocking the gateway: Publish queues a record, a
// goroutine sends it. While klockd cannot be reached, or the queue is
// full, records are dropped and counted (Dropped); the gateway's
// --events-file keeps its own.
type Publisher struct {
	socket string
	q      chan eventlog.Record
	done   chan struct{}

	mu      sync.Mutex
	dropped uint64
}

// publishQueue is how many records a Publisher holds for klockd.
const publishQueue = 1024

// NewPublisher starts a publisher to klockd's socket (SocketPath() when
// empty); Close stops it.
func NewPublisher(socket string) *Publisher {
	if socket == "" {
		socket = SocketPath()
	}
	p := &Publisher{socket: socket, q: make(chan eventlog.Record, publishQueue), done: make(chan struct{})}
	go p.run()
	return p
}

// Publish queues r for klockd, or drops it when the queue is full.
func (p *Publisher) Publish(r eventlog.Record) {
	select {
	case p.q <- r:
	default:
		p.drop(1)
	}
}

// WantsObserved: a gateway has no observed triples.
func (p *Publisher) WantsObserved() bool { return false }

// Dropped counts the records klockd did not get.
func (p *Publisher) Dropped() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *Publisher) drop(n uint64) {
	p.mu.Lock()
	p.dropped += n
	p.mu.Unlock()
}

// Close sends what is queued (within a second) and stops; Publish must
// not be called after it.
func (p *Publisher) Close() {
	close(p.q)
	select {
	case <-p.done:
	case <-time.After(time.Second):
	}
}

// run sends the queue over one connection, dialled again after a
// failure at most once a second (records in between are dropped).
func (p *Publisher) run() {
	defer close(p.done)
	var c *net.UnixConn
	var retry time.Time
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for r := range p.q {
		if c == nil && time.Now().After(retry) {
			cl := &Client{path: p.socket}
			var err error
			if c, err = cl.dial(); err != nil {
				c, retry = nil, time.Now().Add(time.Second)
			}
		}
		if c == nil {
			p.drop(1)
			continue
		}
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := writeFrame(c, &message{Message: wire.Message{Type: typePublish, V: ProtocolVersion}, Event: &r}); err != nil {
			c.Close()
			c, retry = nil, time.Now().Add(time.Second)
			p.drop(1)
		}
	}
}
