package lease

import (
	"os"

	"golang.org/x/sys/unix"
)

// watcher reads the journal as soon as another process appends to it
// (inotify on the store's directory), so that this process's subscribers
// hear of it and its waiters learn they were granted. Without inotify the
// waiters' recheck is what wakes them.
type watcher struct {
	f    *os.File
	done chan struct{}
}

func (h *Host) startWatch() {
	h.watchOnce.Do(func() {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return
		}
		if _, err := unix.InotifyAddWatch(fd, h.dir, unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
			unix.Close(fd)
			return
		}
		w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{})}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			w.f.Close()
			return
		}
		h.watch = w
		h.mu.Unlock()
		go w.run(h)
	})
}

func (w *watcher) run(h *Host) {
	defer close(w.done)
	buf := make([]byte, 4096)
	for {
		// One read takes every event queued: one catching up for all.
		if _, err := w.f.Read(buf); err != nil {
			return
		}
		h.mu.Lock()
		if !h.closed {
			_ = h.catchUpLocked(false)
			h.t.mu.Lock()
			h.t.armLocked()
			h.t.mu.Unlock()
		}
		h.mu.Unlock()
	}
}

func (w *watcher) stop() {
	w.f.Close()
	<-w.done
}
