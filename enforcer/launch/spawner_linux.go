//go:build linux

package launch

import (
	"runtime"
	"sync"
)

// Stage 2 is started with a parent-death signal (SIGKILL), and so is the
// agent it becomes: klock gone, the agent goes. The kernel sends it when
// the parent *thread* exits, not the process (golang/go#27505). A Go
// thread exits when a goroutine that locked it ends without unlocking,
// which libraries do on purpose after a failed setns (mdlayher/socket,
// this repository's looprelay and nshelper): had that thread forked a
// stage 2 earlier, an agent of a session that did nothing wrong would be
// killed from nowhere. So every stage 2 is forked from one thread that is
// locked for the life of the process and runs nothing else.

var spawner = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for f := range ch {
			f()
		}
	}()
	return ch
})

// onSpawnerThread runs start (an exec.Cmd's Start) on the spawner thread
// and returns its error.
func onSpawnerThread(start func() error) error {
	done := make(chan error, 1)
	spawner() <- func() { done <- start() }
	return <-done
}
