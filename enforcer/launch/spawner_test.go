//go:build linux

package launch

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// TestAgentOutlivesExitedThreads: threads of klock's process that exit
// (a goroutine that ends with its thread locked, as libraries do after a
// failed setns) never take a running agent with them, although the agent
// carries a parent-death signal, which the kernel sends when the parent
// *thread* exits: stage 2 is forked from a thread that never exits.
func TestAgentOutlivesExitedThreads(t *testing.T) {
	testutil.RequirePrivileged(t)
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/sleep")
	s := Spec{Ruleset: rs, Group: newGroup(t), User: agentUser(), Args: []string{"/usr/bin/sleep", "30"},
		Env: []string{"PATH=/usr/bin:/bin"}, NewNetNS: true}
	p, err := Spawn(context.Background(), s)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	proc, err := p.Release()
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	defer func() { proc.Kill(); proc.Wait() }()
	// End many threads: every goroutine below locks the thread it runs on
	// and ends without unlocking it, which ends the thread. With few
	// threads in the process, the one that called Spawn is among them
	// unless Spawn's fork came from a thread kept for it.
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 2*runtime.GOMAXPROCS(0); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
			}()
		}
		wg.Wait()
	}
	select {
	case <-proc.Done():
		exit, _ := proc.Wait()
		t.Fatalf("the agent ended while klock's threads came and went: %+v (a parent-death signal from an exited thread)", exit)
	case <-time.After(300 * time.Millisecond):
	}
}
