package main

import (
	"context"
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/spf13/cobra"
)

// runEvents is klock run's --events-file: an embedded session's event
// records, as klockd --events-file writes its sessions'.
type runEvents struct {
	path    string
	maxSize int64
	keep    int
}

func (e *runEvents) register(c *cobra.Command) {
	c.Flags().StringVar(&e.path, "events-file", "", "embedded run: append the session's event records (the lines of klock events -o json) to this file, rotated by size; through klockd they go to klockd's stream (klock events, klockd --events-file)")
	c.Flags().Int64Var(&e.maxSize, "events-file-max-size", eventlog.DefaultMaxSize, "rotate --events-file at this size in bytes")
	c.Flags().IntVar(&e.keep, "events-file-keep", eventlog.DefaultKeep, "rotated events files to keep besides --events-file (0: none)")
}

// attach gives an embedded session's options a hub whose records the
// events file writes (and the host's lease store, wrapped so that its
// decisions are records too); the returned function, called once the
// session is over, writes what is left and closes the file.
func (e *runEvents) attach(opts *session.Options) (func(), error) {
	if e.path == "" {
		return func() {}, nil
	}
	keep := e.keep
	if keep == 0 {
		keep = -1
	}
	f, err := eventlog.OpenFile(e.path, eventlog.FileOptions{MaxSize: e.maxSize, Keep: keep})
	if err != nil {
		return nil, err
	}
	hub := eventlog.NewHub("klock run", 0)
	rd := hub.Subscribe(eventlog.Filter{}, true, 16*eventlog.DefaultRing)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(context.Background(), rd, func(err error) { fmt.Fprintln(os.Stderr, "klock: events file:", err) })
	}()
	opts.Events = eventlog.With(hub, eventlog.Record{Owner: fmt.Sprintf("uid:%d", os.Getuid())})
	if opts.Leases == nil {
		store, err := session.HostLeases()
		if err != nil {
			hub.Close()
			<-done
			return nil, fmt.Errorf("the host's lease store: %w", err)
		}
		opts.Leases = eventlog.Leases(store, opts.Events)
	}
	return func() { hub.Close(); <-done }, nil
}
