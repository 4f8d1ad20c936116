//go:build linux

package session

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// begunLog is the session's first log (vlog.Log.Begin: INCOMPLETE, no
// end), being written in the background while the session is prepared.
type begunLog struct {
	dir  string
	done chan error
	err  func() error
}

func beginLog(dir string, s vlog.Session) *begunLog {
	b := &begunLog{dir: dir, done: make(chan error, 1)}
	b.err = sync.OnceValue(func() error { return <-b.done })
	go func() {
		l := vlog.New(s)
		l.Begin(os.Getpid())
		_, err := l.Write(dir)
		b.done <- err
	}()
	return b
}

// wait returns once the log is on disk; an error refuses the session: its
// end could not be recorded either.
func (b *begunLog) wait() error {
	if err := b.err(); err != nil {
		return fmt.Errorf("%w: %v (the agent was not started)", ErrSetup, err)
	}
	return nil
}

// discard removes the log of a session that did not start: nothing ran
// that it would account for.
func (b *begunLog) discard() {
	if b.err() == nil {
		_ = os.Remove(filepath.Join(b.dir, vlog.FileName))
		_ = os.Remove(b.dir)
	}
}
