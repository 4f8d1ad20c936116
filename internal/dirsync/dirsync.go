// Package dirsync makes a directory's entries durable: after a file is
// created, renamed or removed in dir, the change survives a crash only
// once dir itself is fsynced. Errors are returned as the system call gave
// them; callers that promise durability refuse on any of them.
package dirsync

import "os"

// Sync fsyncs the directory dir.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
