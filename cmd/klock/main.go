// Command klock enforces what an AI agent declared it would do.
//
// This binary is klock's front: it serves `klock run` itself when klockd
// runs the session (it only sends the request and prints the result, so
// it links the daemon's wire protocol and nothing heavier), and the OCI
// hooks klock-runtime writes into a container's spec (hook.go: the
// request klock-runtime prepared goes to klockd as it is), and hands
// every other command, and a run klockd cannot serve, to the full CLI
// (klock-cli, beside it) by exec, with the same arguments. The full CLI
// is cmd/klock-cli; `klock --help` is its help.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// cliName is the full CLI's binary, installed beside klock.
const cliName = "klock-cli"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		if code, served := serveRun(os.Args[2:]); served {
			os.Exit(code)
		}
	}
	if len(os.Args) > 1 && os.Args[1] == "oci-hook" {
		serveHook(os.Args[2:])
	}
	execCLI()
}

// execCLI replaces this process with the full CLI, same arguments and
// environment.
func execCLI() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "klock: cannot find its own binary:", err)
		os.Exit(127)
	}
	cli := filepath.Join(filepath.Dir(self), cliName)
	argv := append([]string{os.Args[0]}, os.Args[1:]...)
	err = syscall.Exec(cli, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "klock: cannot run the klock CLI %s: %v (it is installed beside klock: make install, or the klock package, puts both there)\n", cli, err)
	os.Exit(127)
}
