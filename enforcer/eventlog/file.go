package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Defaults of a File.
const (
	DefaultMaxSize = 64 << 20
	DefaultKeep    = 5
)

// FileOptions configure a File.
type FileOptions struct {
	// MaxSize is the size at which the file is rotated (DefaultMaxSize
	// when 0): PATH becomes PATH.1, PATH.1 PATH.2, and so on.
	MaxSize int64
	// Keep is how many rotated files are kept besides PATH (DefaultKeep
	// when 0; negative: none).
	Keep int
	// Mode is the file's mode (0640 when 0): the records name files and
	// commands.
	Mode os.FileMode
}

// File writes records as JSON lines to PATH, rotated by size, for a log
// shipper that tails it (the shippers follow a rename).
//
// Durability: a record is written with one write(2) (a line is never
// split between files, and a shipper never reads half of one); it is not
// fsynced one by one, which would make the stream as slow as the disk:
// the file is fsynced before each rotation and at Close. A crash of the
// host may lose the page cache's last records; a crash of klockd loses
// none that Write returned for.
type File struct {
	path string
	opt  FileOptions

	mu     sync.Mutex
	f      *os.File
	size   int64
	failed uint64
}

// OpenFile opens (appends to) PATH, creating it with opt.Mode.
func OpenFile(path string, opt FileOptions) (*File, error) {
	if opt.MaxSize <= 0 {
		opt.MaxSize = DefaultMaxSize
	}
	if opt.Keep == 0 {
		opt.Keep = DefaultKeep
	}
	if opt.Mode == 0 {
		opt.Mode = 0o640
	}
	w := &File{path: path, opt: opt}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *File) open() error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, w.opt.Mode)
	if err != nil {
		return fmt.Errorf("eventlog: open %s: %w", w.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("eventlog: open %s: %w", w.path, err)
	}
	w.f, w.size = f, st.Size()
	return nil
}

// Write appends r as one line, rotating first when the line would pass
// MaxSize.
func (w *File) Write(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("eventlog: encode: %w", err)
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("eventlog: write %s: %w", w.path, os.ErrClosed)
	}
	if w.size > 0 && w.size+int64(len(b)) > w.opt.MaxSize {
		if err := w.rotate(); err != nil {
			w.failed++
			return err
		}
	}
	n, err := w.f.Write(b)
	w.size += int64(n)
	if err != nil {
		w.failed++
		return fmt.Errorf("eventlog: write %s: %w", w.path, err)
	}
	return nil
}

// rotate shifts PATH.k to PATH.k+1 (the last one kept is removed), PATH
// to PATH.1, and opens a new PATH.
func (w *File) rotate() error {
	err := w.f.Sync()
	err = errors.Join(err, w.f.Close())
	w.f = nil
	if err != nil {
		err = fmt.Errorf("eventlog: rotate %s: %w", w.path, err)
	}
	keep := max(w.opt.Keep, 0)
	name := func(i int) string { return w.path + "." + strconv.Itoa(i) }
	if keep == 0 {
		if rerr := os.Remove(w.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("eventlog: rotate: %w", rerr))
		}
	} else {
		_ = os.Remove(name(keep))
		for i := keep - 1; i >= 1; i-- {
			if rerr := os.Rename(name(i), name(i+1)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("eventlog: rotate: %w", rerr))
			}
		}
		if rerr := os.Rename(w.path, name(1)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("eventlog: rotate: %w", rerr))
		}
	}
	if oerr := w.open(); oerr != nil {
		return errors.Join(err, oerr)
	}
	return err
}

// Failed counts the records that could not be written.
func (w *File) Failed() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// Close fsyncs and closes the file.
func (w *File) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := errors.Join(w.f.Sync(), w.f.Close())
	w.f = nil
	return err
}

// Run writes what rd reads until it ends (ErrClosed, or ctx), then
// closes the file. The file is a reader like any other: a slow disk
// loses records (a KindLost line says how many), never slows the hub.
// onError, when set, hears each write error.
func (w *File) Run(ctx context.Context, rd *Reader, onError func(error)) {
	defer w.Close()
	for {
		r, err := rd.Next(ctx)
		if err != nil {
			return
		}
		if err := w.Write(r); err != nil && onError != nil {
			onError(err)
		}
	}
}
