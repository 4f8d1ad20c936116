package main

import (
	"fmt"
	"github.com/klocklabs/klock/internal/runout"
	"io"
	"sync"
)

// permissiveNotice is KLIS-6 §3.2's warning (runout.PermissiveNotice).
const permissiveNotice = runout.PermissiveNotice

var permissiveOnce sync.Once

// warnPermissive prints permissiveNotice once per process, however many
// times a permissive session is started or amended.
func warnPermissive(w io.Writer) {
	permissiveOnce.Do(func() { fmt.Fprintln(w, permissiveNotice) })
}
