package lease

import "time"

// EventType names what happened in a store (the KLIS-7 event stream).
type EventType string

const (
	LeaseGranted       EventType = "LeaseGranted"
	LeaseFreed         EventType = "LeaseFreed" // released, expired or revoked: Lease.State says which
	ContentionDetected EventType = "ContentionDetected"
)

// Event is one entry of a store's event stream.
type Event struct {
	Type     EventType `json:"type"`
	Time     time.Time `json:"time"`
	Lease    Lease     `json:"lease,omitempty"`
	Holder   Holder    `json:"holder,omitempty"`   // ContentionDetected: the requester
	Decision *Decision `json:"decision,omitempty"` // ContentionDetected: its answer
}

// Subscribe returns a channel of the table's events from now on, and a
// function that ends the subscription. A subscriber that does not keep up
// loses events (never blocks the table); buf sizes its channel.
func (t *Table) Subscribe(buf int) (<-chan Event, func()) {
	ch := make(chan Event, buf)
	t.mu.Lock()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		if _, ok := t.subs[ch]; ok {
			delete(t.subs, ch)
			close(ch)
		}
		t.mu.Unlock()
	}
}

func (t *Table) publishLocked(e Event) {
	if t.sink != nil {
		t.deferred = append(t.deferred, deferred{e: &e})
		return
	}
	for ch := range t.subs {
		select {
		case ch <- e:
		default:
		}
	}
}
