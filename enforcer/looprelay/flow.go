//go:build linux

package looprelay

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A spliced flow: the kernel moves its bytes; the relay only watches its
// two sockets for their ends, forwards each half-close once what came
// before it was sent, and closes both when both directions are done (or
// either fails).
type flow struct {
	c       *counts
	in, out half // in: the agent's side (in the namespace); out: the host's
	owned   netip.AddrPort

	mu       sync.Mutex
	draining [2]bool // a half-close seen: 0 agent to service (in to out), 1 back
	shut     [2]bool // ... and forwarded
	done     bool
}

// watcher waits on the spliced flows' sockets for their ends: one epoll
// of the relay's own, interested in read hang-ups and errors only, so the
// kernel's wake-up for every skb it moves wakes nobody.
type watcher struct {
	ep, ev int // the epoll, and an eventfd that stops it
	mu     sync.Mutex
	next   uint64
	// ids are the epoll's registrations (an id, not the descriptor: a
	// stale event for a closed and reused descriptor must find nothing).
	ids map[uint64]watched
}

type watched struct {
	f   *flow
	dir int // the direction whose source this socket is
}

func newWatcher() (*watcher, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("looprelay: epoll: %w", err)
	}
	ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("looprelay: eventfd: %w", err)
	}
	w := &watcher{ep: ep, ev: ev, next: 1, ids: map[uint64]watched{}}
	if err := w.ctl(unix.EPOLL_CTL_ADD, ev, unix.EPOLLIN, 0); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) ctl(op, fd int, events uint32, id uint64) error {
	e := unix.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	if err := unix.EpollCtl(w.ep, op, fd, &e); err != nil {
		return fmt.Errorf("looprelay: epoll_ctl: %w", err)
	}
	return nil
}

// watch registers both sockets of f.
func (w *watcher) watch(f *flow) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for dir, h := range []half{f.in, f.out} {
		id := w.next
		w.next++
		w.ids[id] = watched{f, dir}
		// Edge-triggered: a hang-up is reported once (again only on a
		// later state change, which finds the direction draining).
		if err := w.ctl(unix.EPOLL_CTL_ADD, h.fd, unix.EPOLLRDHUP|unix.EPOLLET, id); err != nil {
			return err
		}
	}
	return nil
}

// forget drops f's registrations (its descriptors are about to close).
func (w *watcher) forget(f *flow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, x := range w.ids {
		if x.f == f {
			delete(w.ids, id)
		}
	}
}

// stop wakes the loop to return.
func (w *watcher) stop() {
	var one = [8]byte{1}
	_, _ = unix.Write(w.ev, one[:])
}

func (w *watcher) close() {
	unix.Close(w.ep)
	unix.Close(w.ev)
}

// loop hands every hang-up to the relay until stop.
func (r *Relay) loop(w *watcher) {
	defer r.wg.Done()
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(w.ep, evs, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, e := range evs[:n] {
			id := uint64(uint32(e.Fd)) | uint64(uint32(e.Pad))<<32
			if id == 0 {
				return // stop
			}
			w.mu.Lock()
			x, ok := w.ids[id]
			w.mu.Unlock()
			if !ok {
				continue
			}
			if e.Events&unix.EPOLLERR != 0 {
				r.endFlow(x.f)
				continue
			}
			if e.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP) != 0 {
				r.halfClosed(x.f, x.dir)
			}
		}
	}
}

// halfClosed: the source of direction dir will send nothing more. Its
// half-close goes to the other socket once all it sent before went
// out, or its FIN would overtake data the kernel still holds in the
// peer's queue (sockmap's redirect is asynchronous).
func (r *Relay) halfClosed(f *flow, dir int) {
	f.mu.Lock()
	if f.done || f.draining[dir] {
		f.mu.Unlock()
		return
	}
	f.draining[dir] = true
	f.mu.Unlock()
	src, dst := f.in, f.out
	if dir == 1 {
		src, dst = f.out, f.in
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// TCP_INFO takes the source socket's lock: the FIN's processing,
		// and the verdict on the data that came with it, are over when
		// it returns, so the count read next is final.
		err := f.use(func() error {
			_, err := unix.GetsockoptTCPInfo(src.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
			return err
		})
		if err != nil {
			r.endFlow(f)
			return
		}
		_, want := r.spl.received(src)
		pause := 50 * time.Microsecond
		for {
			var sent bool
			err := f.use(func() error {
				w, err := written(dst.fd)
				if err != nil || w-dst.base < want {
					return err
				}
				sent = true
				return unix.Shutdown(dst.fd, unix.SHUT_WR)
			})
			if errors.Is(err, errDone) {
				return
			}
			if err != nil {
				r.endFlow(f)
				return
			}
			if sent {
				break
			}
			// The peer's reader is slow (its window full), or the
			// kernel's worker has yet to run: as a copy's Write blocks.
			time.Sleep(pause)
			pause = min(2*pause, 20*time.Millisecond)
		}
		f.mu.Lock()
		f.shut[dir] = true
		both := f.shut[0] && f.shut[1]
		f.mu.Unlock()
		if both {
			r.endFlow(f)
		}
	}()
}

var errDone = errors.New("looprelay: flow ended")

// use runs fn while f's descriptors are open (errDone once they are
// not): a descriptor closed and reused meanwhile is never touched.
func (f *flow) use(fn func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return errDone
	}
	return fn()
}

// endFlow closes both sockets of f and moves its counts to its peer's
// totals; it may be called again.
func (r *Relay) endFlow(f *flow) {
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		return
	}
	f.done = true
	r.watch.forget(f)
	unix.Close(f.in.fd)
	unix.Close(f.out.fd)
	f.mu.Unlock()
	// Closed, the sockets left the socket map: no more verdicts, the
	// counts are final. Moved under r.mu, as Counters reads them.
	r.mu.Lock()
	p, b := r.spl.received(f.in)
	f.c.outP.Add(p)
	f.c.outB.Add(b)
	p, b = r.spl.received(f.out)
	f.c.inP.Add(p)
	f.c.inB.Add(b)
	delete(r.spliced, f)
	r.mu.Unlock()
	r.spl.forget(f.in)
	r.spl.forget(f.out)
	r.owned.Delete(f.owned)
}
