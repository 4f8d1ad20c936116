package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrRollbackWindow: a rollback.window that starts like a duration but
// cannot be read as one.
var ErrRollbackWindow = errors.New("rollback window cannot be read")

// windowRe reads seed 002's "24h from issue": a count and a unit at the
// start, the rest prose ("from issue").
var windowRe = regexp.MustCompile(`^([0-9]+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)\b`)

var windowUnits = map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}

// Duration is how long after the call its compensation still works (seed
// 002: "the time window in which it works"), read from the window's
// leading duration: "24h from issue" is 24 hours. ok is false when the
// window names no duration (empty, "session", prose such as "until
// sent"): the compensation is then not bounded by a clock. A window that
// starts with a number it cannot read returns ErrRollbackWindow.
func (r Rollback) Duration() (d time.Duration, ok bool, err error) {
	w := strings.TrimSpace(r.Window)
	if w == "" || w[0] < '0' || w[0] > '9' {
		return 0, false, nil
	}
	m := windowRe.FindStringSubmatch(w)
	if m == nil {
		return 0, false, fmt.Errorf("%w: %q: write a count and a unit first (30s, 15m, 24h, 7d, 2w; e.g. \"24h from issue\")", ErrRollbackWindow, r.Window)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	unit := windowUnits[m[2][0]]
	if err != nil || n <= 0 || n > int64(1<<62)/int64(unit) {
		return 0, false, fmt.Errorf("%w: %q: the count must be positive and fit in a duration", ErrRollbackWindow, r.Window)
	}
	return time.Duration(n) * unit, true, nil
}
