package check

import "time"

// categoryDefault is seed 004 §7: timeout and rate by security category.
// The seed gives "high/medium/low/very low" for rates; these numbers are
// klock's reading of them, per minute.
type categoryDefault struct {
	Timeout   time.Duration
	PerMinute int
}

var categories = map[string]categoryDefault{
	"A": {Timeout: 2 * time.Second, PerMinute: 600},
	"B": {Timeout: 3 * time.Second, PerMinute: 120},
	"C": {Timeout: 5 * time.Second, PerMinute: 30},
	"D": {Timeout: 10 * time.Second, PerMinute: 6},
}

// CategoryDefaults returns the timeout and per-minute rate of category c
// (A–D), and false for an unknown or empty category.
func CategoryDefaults(c string) (time.Duration, int, bool) {
	d, ok := categories[c]
	return d.Timeout, d.PerMinute, ok
}
