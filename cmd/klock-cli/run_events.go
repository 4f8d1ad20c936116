package main

import (
	"context"
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/spf13/cobra"
)

// eventsFile is the --events-file of klock run (an embedded session's
// event records) and of the gateways (klock mcp, klock tools serve): the
// lines klockd --events-file writes, rotated by size.
type eventsFile struct {
	path    string
	maxSize int64
	keep    int
}

func (e *eventsFile) register(c *cobra.Command, what string) {
	c.Flags().StringVar(&e.path, "events-file", "", "append "+what+" event records (the lines of klock events -o json) to this file, rotated by size")
	c.Flags().Int64Var(&e.maxSize, "events-file-max-size", eventlog.DefaultMaxSize, "rotate --events-file at this size in bytes")
	c.Flags().IntVar(&e.keep, "events-file-keep", eventlog.DefaultKeep, "rotated events files to keep besides --events-file (0: none)")
}

// open returns a sink whose records the file gets, labelled source and
// owned by this uid (nil without --events-file); close, once nothing
// publishes any more, writes what is left and closes the file.
func (e *eventsFile) open(source string) (sink eventlog.Sink, closeFile func(), err error) {
	if e.path == "" {
		return nil, func() {}, nil
	}
	keep := e.keep
	if keep == 0 {
		keep = -1 // a zero FileOptions.Keep means the default
	}
	f, err := eventlog.OpenFile(e.path, eventlog.FileOptions{MaxSize: e.maxSize, Keep: keep})
	if err != nil {
		return nil, nil, err
	}
	hub := eventlog.NewHub(source, 0)
	rd := hub.Subscribe(eventlog.Filter{}, true, 16*eventlog.DefaultRing)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(context.Background(), rd, func(err error) { fmt.Fprintln(os.Stderr, "klock: events file:", err) })
	}()
	return eventlog.With(hub, eventlog.Record{Owner: fmt.Sprintf("uid:%d", os.Getuid())}), func() { hub.Close(); <-done }, nil
}

// attach gives an embedded session's options the events file's sink (and
// the host's lease store, wrapped so that its decisions are records too);
// through klockd, its sessions' records are klockd's (klock events,
// klockd --events-file).
func (e *eventsFile) attach(opts *session.Options) (func(), error) {
	sink, closeFile, err := e.open("klock run")
	if err != nil || sink == nil {
		return closeFile, err
	}
	opts.Events = sink
	if opts.Leases == nil {
		store, err := session.HostLeases()
		if err != nil {
			closeFile()
			return nil, fmt.Errorf("the host's lease store: %w", err)
		}
		opts.Leases = eventlog.Leases(store, sink)
	}
	return closeFile, nil
}

// gatewayEvents is where a gateway's records go: klockd (its publish
// request, when it runs: klock events and klockd --events-file show them,
// labelled with this uid) and --events-file.
func (e *eventsFile) gatewayEvents() (eventlog.Sink, func(), error) {
	sink, closeFile, err := e.open("klock gateway")
	if err != nil {
		return nil, nil, err
	}
	pub := daemon.NewPublisher("")
	return eventlog.Tee(pub, sink), func() { pub.Close(); closeFile() }, nil
}
