//go:build linux

package snapshot

import (
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// TerminalProgress returns an Options.Progress that draws a one-line bar
// on w, or nil when w is not a terminal (a log file, a pipe): the bar never
// ends up in logs. The bar ends with a newline when done reaches total.
func TerminalProgress(w io.Writer) func(done, total int64) {
	if w == nil || !IsTerminal(w) {
		return nil
	}
	return func(done, total int64) {
		const width = 30
		frac := 1.0
		if total > 0 {
			frac = float64(done) / float64(total)
		}
		n := int(frac * width)
		fmt.Fprintf(w, "\rbackup [%s%s] %3.0f%% %s/%s", strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, human(done), human(total))
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
