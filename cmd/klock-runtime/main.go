// Command klock-runtime is an OCI runtime that puts a container under
// klock: on create and run it finds the container's manifest
// (enforcer/oci.Discover), rewrites the bundle's config.json
// (enforcer/oci.Rewrite) and execs the real runtime (runc by default, or
// crun: runtime.go) with the same argv; on exec into a container it prepared it puts the
// exec'd process behind klock-stage2 too (exec.go); every other command,
// and a container with no manifest, passes straight through with the
// bundle untouched. It stays thin: the logic is enforcer/oci's; klock's
// oci-hook and klockd run the session.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/klocklabs/klock/enforcer/oci"
	"github.com/klocklabs/klock/internal/version"
)

// Where klock-runtime reads and writes; tests point them elsewhere.
var (
	configPath = oci.DefaultConfigPath
	// stateRoot holds one directory per container (klock-stage2 and
	// wall.json, bound read-only at /dev/.klock).
	stateRoot = oci.StateRoot
	// exeDir is the directory klock-runtime was installed in, where it
	// looks for klock and klock-stage2 first.
	exeDir = func() string {
		exe, err := os.Executable()
		if err != nil {
			return ""
		}
		return filepath.Dir(exe)
	}
	// execve replaces the process with the real runtime.
	execve = syscall.Exec
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	inv, err := parseArgs(args)
	if err != nil {
		report(nil, err)
		return 1
	}
	if inv.help {
		fmt.Print(helpText)
		return 0
	}
	if inv.version {
		fmt.Printf("klock-runtime version %s\n", version.Version)
	}
	var cfg *oci.Config
	needConfig := inv.command == "create" || inv.command == "run" || (inv.runtimePath == "" && inv.runtimeName == "")
	if needConfig {
		path := configPath
		if inv.config != "" {
			path = inv.config
		}
		if cfg, err = oci.LoadConfig(path); err != nil {
			report(inv, err)
			return 1
		}
	}
	runtime, err := realRuntime(inv, cfg)
	if err != nil {
		report(inv, err)
		return 1
	}
	var stateDir string
	if (inv.command == "create" || inv.command == "run") && !asksHelp(inv.args) {
		if stateDir, err = prepare(inv, cfg); err != nil {
			report(inv, err)
			return 1
		}
	}
	argv := inv.argv
	if inv.command == "exec" {
		if argv, err = execArgv(inv); err != nil {
			report(inv, err)
			return 1
		}
	}
	if inv.command == "run" && stateDir != "" && !detached(inv.args) {
		// run's status is the container's: klock-runtime waits for the
		// real runtime to report a strict kill that landed too late for
		// the container's own status to show it (wait.go).
		if code, ok := runAndReport(inv, runtime, argv, stateDir); ok {
			return code
		}
	}
	err = execve(runtime, append([]string{runtime}, argv...), os.Environ())
	report(inv, fmt.Errorf("exec %s: %w", runtime, err))
	return 1
}

// asksHelp: "runc create --help" prints runc's help and creates nothing.
func asksHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if name, _, _ := flagName(a); strings.HasPrefix(a, "-") && (name == "help" || name == "h") {
			return true
		}
	}
	return false
}
