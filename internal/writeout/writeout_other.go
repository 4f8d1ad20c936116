//go:build !linux

package writeout

import "os"

// Range does nothing here: the caller's fsync writes it all at once.
func Range(*os.File, int64, int64) error { return nil }
