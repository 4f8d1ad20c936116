//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon/wire"
	"github.com/klocklabs/klock/enforcer/oci/statedir"
	"golang.org/x/sys/unix"
)

// hookState is the part of the OCI state (runtime-spec state.md) the hook
// reads on stdin.
type hookState struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Pid    int    `json:"pid"`
	Bundle string `json:"bundle"`
}

// endWait bounds the poststop hook's wait for the session's end (its
// rollback and log), as the full CLI's hook does.
const endWait = 5 * time.Minute

// serveHook serves `klock oci-hook [createRuntime|poststop]` as klock-runtime
// writes it into the specs it rewrites: createRuntime sends the adopt
// request klock-runtime prepared at create (statedir.AdoptFileName) with
// the init's pid; poststop waits for the session's end. What it cannot
// serve (flags, hook-only mode with no prepared request, a state or a
// socket it cannot use) goes to the full CLI with the same stdin, which
// reports it with the CLI's errors. It does not return.
func serveHook(args []string) {
	if len(args) > 1 || (len(args) == 1 && args[0] != "createRuntime" && args[0] != "poststop") {
		execCLI()
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		handOver(data)
	}
	var st hookState
	if json.Unmarshal(data, &st) != nil || !validID(st.ID) || st.Bundle == "" {
		handOver(data)
	}
	stage := hookStage(args, st.Status)
	switch stage {
	case "createRuntime":
		os.Exit(hookCreate(data, &st))
	case "poststop":
		os.Exit(hookPoststop(data, &st))
	}
	handOver(data)
}

// hookStage is the stage the argument names, else the one the state's
// status says (one hooks.d file runs the same argv at both).
func hookStage(args []string, status string) string {
	if len(args) == 1 {
		return args[0]
	}
	switch status {
	case "creating", "created":
		return "createRuntime"
	case "stopped":
		return "poststop"
	}
	return ""
}

// validID: the id names a directory under statedir.Root.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// hookCreate sends the adopt request klock-runtime prepared for st's
// container and returns the hook's exit status.
func hookCreate(data []byte, st *hookState) int {
	req, ok := preparedAdopt(st)
	if !ok {
		handOver(data)
	}
	c, err := wire.Dial("")
	if err != nil {
		handOver(data) // the CLI says what to do about klockd
	}
	info, err := wire.Adopt(c, req, 30*time.Minute)
	if err != nil {
		return hookFailed(fmt.Errorf("oci-hook: container %s: klockd refused it: %w", st.ID, err))
	}
	fmt.Fprintf(os.Stderr, "klock: container %s walled by session %s (%s mode)\n", st.ID, info.ID, info.Mode)
	return 0
}

// preparedAdopt reads the request klock-runtime prepared at st's create:
// only for a spec klock-runtime rewrote, from this bundle, and with an
// init to wall; else ok is false and the full CLI prepares it.
func preparedAdopt(st *hookState) (req *wire.AdoptRequest, ok bool) {
	if st.Pid <= 0 {
		return nil, false
	}
	spec, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return nil, false
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(spec, &ann) != nil || ann.Annotations[statedir.AnnotationRuntime] != statedir.RuntimeFull {
		return nil, false
	}
	f, err := os.OpenFile(filepath.Join(statedir.Dir(st.ID), statedir.AdoptFileName), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	req = &wire.AdoptRequest{}
	if json.NewDecoder(io.LimitReader(f, wire.MaxRequestFrame)).Decode(req) != nil || req.ContainerID != st.ID || req.Bundle != st.Bundle {
		return nil, false
	}
	req.Pid = st.Pid
	return req, true
}

// hookPoststop waits for st's container's session to end, tells
// klock-runtime's run how it ended, and removes the state directory.
func hookPoststop(data []byte, st *hookState) int {
	c, err := wire.Dial("")
	if err != nil {
		handOver(data)
	}
	defer os.RemoveAll(statedir.Dir(st.ID))
	res, err := wire.End(c, st.ID, endWait)
	var we *wire.Error
	if errors.As(err, &we) && we.Class == wire.ClassNoSession {
		return 0 // never adopted (no manifest, or createRuntime failed and said why)
	}
	if err != nil {
		return hookFailed(fmt.Errorf("oci-hook: container %s: %w", st.ID, err))
	}
	statedir.WriteOutcome(st.ID, statedir.Outcome{Session: res.ID, Killed: res.Killed, Interrupted: res.Interrupted, Reason: res.Reason, Log: res.LogPath})
	verdict := "ended"
	if res.Killed {
		verdict = "killed: " + res.Reason
	}
	fmt.Fprintf(os.Stderr, "klock: container %s session %s %s; log: %s\n", st.ID, res.ID, verdict, res.LogPath)
	return 0
}

// hookFailed reports err as the full CLI does and returns its status for
// an error (the runtime then does not start the container).
func hookFailed(err error) int {
	fmt.Fprintln(os.Stderr, "klock:", err)
	return 2
}

// handOver gives the hook to the full CLI with the state it read put back
// on stdin (a memfd: the state may exceed a pipe's buffer). It does not
// return.
func handOver(data []byte) {
	fd, err := unix.MemfdCreate("klock-oci-state", unix.MFD_CLOEXEC)
	if err == nil {
		f := os.NewFile(uintptr(fd), "klock-oci-state")
		if _, err = f.Write(data); err == nil {
			if _, err = f.Seek(0, io.SeekStart); err == nil {
				err = unix.Dup3(fd, 0, 0)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "klock: oci-hook: cannot hand the container's state to the klock CLI:", err)
		os.Exit(2)
	}
	execCLI()
}
