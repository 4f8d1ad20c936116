package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/klocklabs/klock/enforcer/oci"
	"golang.org/x/sys/unix"
)

// exitKilled is run's status for a container klock killed: 128+SIGKILL,
// what runc (and Podman, Docker and containerd, which read the init's
// status themselves) report for a container whose cgroup klock killed
// while it ran. klock run's own 113 is not used here: the same strict
// kill would then read 137 through an engine or when the kill beat the
// container's exit, and 113 when the container had exited first; a
// runtime's caller knows 137 as "killed", and the verification log (and
// klock-runtime's stderr line) says who killed it and why.
const exitKilled = 128 + int(syscall.SIGKILL)

// detached says whether run's arguments ask for --detach (-d): runc then
// returns once the container started, and its status says nothing of
// the container's end.
func detached(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return false
		}
		if len(a) < 2 || a[0] != '-' {
			continue // the container id
		}
		name, value, hasValue := flagName(a)
		if createValueFlags[name] && !hasValue {
			i++ // its value
			continue
		}
		if name != "detach" && name != "d" {
			continue
		}
		if !hasValue {
			return true
		}
		b, err := strconv.ParseBool(value)
		return err != nil || b
	}
	return false
}

// runAndReport runs the real runtime's run as a child instead of exec'ing
// it, with the descriptors exec would have passed, every signal
// forwarded, and then reads how the container's session ended from the
// outcome file the poststop hook wrote (runc runs that hook before run
// returns): a session klock killed exits exitKilled even when the
// container had already exited by itself, 0 or otherwise, before the kill
// (the violation is read after the syscall, and a short-lived container
// may be gone by then). Any other end is the runtime's own status. ok is
// false when the outcome file cannot be made: the caller execs the
// runtime as before (its status then is the container's own).
func runAndReport(inv *invocation, runtime string, argv []string, stateDir string) (code int, ok bool) {
	name := filepath.Join(stateDir, oci.OutcomeFileName)
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		report(inv, fmt.Errorf("the outcome file (the container's status will be its own, even after a strict kill): %w", err))
		return 0, false
	}
	// Held open: the poststop hook removes the state directory once it
	// wrote here.
	outcome, err := os.Open(name)
	if err != nil {
		report(inv, fmt.Errorf("the outcome file (the container's status will be its own, even after a strict kill): %w", err))
		return 0, false
	}
	defer outcome.Close()
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs)
	defer signal.Stop(sigs)
	p, err := os.StartProcess(runtime, append([]string{runtime}, argv...), &os.ProcAttr{Env: os.Environ(), Files: inherited()})
	if err != nil {
		_ = os.Remove(name)
		report(inv, fmt.Errorf("start %s: %w", runtime, err))
		return 1, true
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				// SIGCHLD is the runtime's own end; SIGURG is the Go
				// runtime's preemption of klock-runtime's threads.
				if s == syscall.SIGCHLD || s == syscall.SIGURG {
					continue
				}
				_ = p.Signal(s)
			case <-done:
				return
			}
		}
	}()
	st, err := p.Wait()
	close(done)
	if err != nil {
		report(inv, fmt.Errorf("wait for %s: %w", runtime, err))
		return 1, true
	}
	code = st.ExitCode()
	if ws, isWS := st.Sys().(syscall.WaitStatus); isWS && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if o, read := readOutcome(outcome); read && o.Killed && !o.Interrupted {
		fmt.Fprintf(os.Stderr, "klock-runtime: container killed by klock (session %s): %s; log: %s\n", o.Session, o.Reason, o.Log)
		return exitKilled, true
	}
	return code, true
}

// readOutcome reads what the poststop hook wrote; false when it wrote
// nothing (no session: the container never started, or it is not the
// hook's).
func readOutcome(f *os.File) (oci.Outcome, bool) {
	var o oci.Outcome
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil || len(b) == 0 {
		return o, false
	}
	if json.Unmarshal(b, &o) != nil {
		return o, false
	}
	return o, true
}

// inherited are the descriptors an exec of the runtime would have passed
// (those without close-on-exec, at their own numbers): run's
// --preserve-fds and a socket-activated LISTEN_FDS count on them.
func inherited() []*os.File {
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return files
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // the directory being read, the Go runtime's own
		}
		for len(files) <= fd {
			files = append(files, nil)
		}
		files[fd] = os.NewFile(uintptr(fd), "fd"+e.Name())
	}
	return files
}
