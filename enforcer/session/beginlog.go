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
	dir     string
	written func() error // waits for the write, once; its error
}

func beginLog(dir string, s vlog.Session) *begunLog {
	done := make(chan error, 1)
	go func() {
		l := vlog.New(s)
		l.Begin(os.Getpid())
		_, err := l.Write(dir)
		done <- err
	}()
	return &begunLog{dir: dir, written: sync.OnceValue(func() error { return <-done })}
}

// wait returns once the log is on disk; an error refuses the session: its
// end could not be recorded either.
func (b *begunLog) wait() error {
	if err := b.written(); err != nil {
		return fmt.Errorf("%w: %v (the agent was not started)", ErrSetup, err)
	}
	return nil
}

// discard removes the log of a session that did not start: nothing ran
// that it would account for.
func (b *begunLog) discard() {
	if b.written() == nil {
		_ = os.Remove(filepath.Join(b.dir, vlog.FileName))
		_ = os.Remove(b.dir)
	}
}
