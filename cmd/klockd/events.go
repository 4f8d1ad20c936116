package main

import (
	"flag"

	"github.com/klocklabs/klock/enforcer/eventlog"
)

// eventsOptions are the --events-file flags.
type eventsOptions struct {
	path    *string
	maxSize *int64
	keep    *int
}

func eventsFlags(fs *flag.FlagSet) *eventsOptions {
	return &eventsOptions{
		path:    fs.String("events-file", "", "also write every event record (klock events -o json, one a line) to this file, for a log shipper"),
		maxSize: fs.Int64("events-file-max-size", eventlog.DefaultMaxSize, "rotate the events file at this size in bytes: PATH becomes PATH.1, PATH.1 PATH.2, ..."),
		keep:    fs.Int("events-file-keep", eventlog.DefaultKeep, "rotated events files to keep besides PATH (0: none)"),
	}
}

// open opens the events file (nil without --events-file).
func (o *eventsOptions) open() (*eventlog.File, error) {
	if *o.path == "" {
		return nil, nil
	}
	keep := *o.keep
	if keep == 0 {
		keep = -1 // a zero FileOptions.Keep means the default
	}
	return eventlog.OpenFile(*o.path, eventlog.FileOptions{MaxSize: *o.maxSize, Keep: keep})
}
