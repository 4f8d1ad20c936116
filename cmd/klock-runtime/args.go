package main

import (
	"fmt"
	"strings"
)

// invocation is what klock-runtime reads of its argv; everything else is
// the real runtime's business and passes through unchanged.
type invocation struct {
	// argv is the real runtime's argv without argv[0] and without
	// --runtime-path: exactly what we were given otherwise.
	argv []string
	// runtimePath is --runtime-path, "" when not given.
	runtimePath string
	// runtimeName is --runtime (runc or crun, found on PATH), "" when not
	// given.
	runtimeName string
	// config is --klock-config (runtime.yaml elsewhere: Docker's
	// daemon.json runtimeArgs, tests), "" when not given.
	config string
	// log and logFormat are runc's --log and --log-format: containerd and
	// podman read errors from that file.
	log, logFormat string
	// command is the first argument after the global flags ("" when none)
	// and args what follows it.
	command string
	args    []string
	help    bool // --help/-h/help with no command
	version bool // --version/-v
}

// ownFlags are klock-runtime's global flags (with an example value), taken
// out of the argv the real runtime gets.
var ownFlags = map[string]string{"runtime-path": "/usr/bin/runc", "runtime": "crun", "klock-config": "/etc/klock/runtime.yaml"}

// Global flags of runc (urfave/cli: -x and --x, "--x=v" and "--x v") and
// crun (argp: its --cgroup-manager and --log-level besides runc's).
var (
	valueFlags = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true,
		"cgroup-manager": true, "log-level": true}
	boolFlags = map[string]bool{"debug": true, "systemd-cgroup": true, "help": true, "h": true, "version": true, "v": true}
)

// flagName splits "-x", "--x" or "--x=v" into its name and value.
func flagName(a string) (name, value string, hasValue bool) {
	a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	name, value, hasValue = strings.Cut(a, "=")
	return
}

func parseArgs(args []string) (*invocation, error) {
	inv := &invocation{}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, value, hasValue := flagName(a)
		if example, ours := ownFlags[name]; ours {
			if !hasValue {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("--%s needs a value, e.g. --%s=%s", name, name, example)
				}
				i++
				value = args[i]
			}
			if value == "" {
				return nil, fmt.Errorf("--%s is empty", name)
			}
			switch name {
			case "runtime-path":
				inv.runtimePath = value
			case "runtime":
				inv.runtimeName = value
			default:
				inv.config = value
			}
			continue // ours: not passed on
		}
		inv.argv = append(inv.argv, a)
		switch {
		case valueFlags[name]:
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
				inv.argv = append(inv.argv, value)
			}
			switch name {
			case "log":
				inv.log = value
			case "log-format":
				inv.logFormat = value
			}
		case name == "help" || name == "h":
			inv.help = true
		case name == "version" || name == "v":
			inv.version = true
		}
		// Unknown flags pass through as they are (taken for booleans).
	}
	inv.argv = append(inv.argv, args[i:]...)
	if i < len(args) && args[i] != "--" {
		inv.command = args[i]
		inv.args = args[i+1:]
	}
	if inv.command == "help" && len(inv.args) == 0 {
		inv.help = true
	}
	if inv.command != "" && inv.command != "help" {
		inv.help = false // "runc create --help" is runc's
	}
	return inv, nil
}

// createFlags are the value-taking flags of runc create and run; the
// others (--detach, --keep, --no-pivot, --no-new-keyring, --no-subreaper,
// --systemd-cgroup...) take none.
var createValueFlags = map[string]bool{"bundle": true, "b": true, "console-socket": true, "pidfd-socket": true,
	"pid-file": true, "preserve-fds": true}

// bundleAndID reads create's and run's arguments: the bundle (--bundle,
// -b, --bundle=x; default "." ) and the container id (the last
// positional argument).
func bundleAndID(args []string) (bundle, id string, err error) {
	bundle = "."
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := flagName(a)
		if !createValueFlags[name] {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return "", "", fmt.Errorf("%s needs a value", a)
			}
			i++
			value = args[i]
		}
		if name == "bundle" || name == "b" {
			bundle = value
		}
	}
	if len(positional) == 0 {
		return "", "", fmt.Errorf("no container id (want: create [--bundle DIR] ID)")
	}
	return bundle, positional[len(positional)-1], nil
}
