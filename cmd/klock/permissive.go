package main

import (
	"fmt"
	"io"
	"sync"
)

// permissiveNotice is KLIS-6 §3.2's warning: permissive mode logs and
// amends instead of stopping the agent, so it defeats what a declared scope
// is for.
const permissiveNotice = "klock: WARNING: permissive mode: scope violations are logged and the scope amended, not stopped. " +
	"It is for development and learning (--learn) and must not be used in production (KLIS-6 §3.2); run strict there."

var permissiveOnce sync.Once

// warnPermissive prints permissiveNotice once per process, however many
// times a permissive session is started or amended.
func warnPermissive(w io.Writer) {
	permissiveOnce.Do(func() { fmt.Fprintln(w, permissiveNotice) })
}
