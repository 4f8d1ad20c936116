// Package version reports klock's version: set at link time by the Makefile
// (-X), else taken from the module build info.
package version

import "runtime/debug"

// Version is set with -ldflags "-X github.com/klocklabs/klock/internal/version.Version=...".
var Version = ""

// String returns the version and the VCS revision when known.
func String() string {
	v := Version
	info, ok := debug.ReadBuildInfo()
	if v == "" && ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	if v == "" {
		v = "dev"
	}
	if ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}
