//go:build !linux

package budget

import "os"

func datasync(f *os.File) error { return f.Sync() }
