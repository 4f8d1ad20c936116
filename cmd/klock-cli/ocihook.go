package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/oci"
	"github.com/klocklabs/klock/enforcer/oci/statedir"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
)

// newOCIHook is the OCI hook klock-runtime puts in a container's spec
// (createRuntime and poststop), and that runtimes taking hooks but not a
// runtime (CRI-O, Podman's hooks.d) run from a hook file.
func newOCIHook() *cobra.Command {
	var socket, config string
	c := &cobra.Command{
		Use:   "oci-hook [createRuntime|poststop]",
		Short: "The OCI hook that hands a container to klockd (klock-runtime and hooks.d)",
		Long: `oci-hook is run by a container runtime, not by hand. It reads the OCI state
of the container on stdin and its bundle's config.json.

createRuntime (the container's init exists and waits; its entrypoint has not
run): finds the container's manifest (annotation io.klock.manifest, or a
mapping in /etc/klock/runtime.yaml), maps its paths to the host through the
spec's mounts, and asks klockd to wall the container: leases, the pre-flight
backup of the host paths, the kernel backends on the container's cgroup.
It exits 0 once the session runs; any failure exits 1 and the runtime does
not start the container. klockd must be running.

poststop: waits for the container's session to end (its rollback and its
verification log written) and prints where the log is.

Two modes: klock-runtime (the spec says io.klock.runtime=klock-runtime)
also runs klock-stage2 as the container's first process, which puts the
Landlock wall up inside it; hook-only mode (a hooks.d file) has no klock
code inside the container: bpf-lsm where the kernel has it, else the
tracepoints detect, kill and roll back.

Without a stage argument the state's status says which stage it is
(creating: createRuntime; stopped: poststop), so one hooks.d file serves
Podman or CRI-O (/usr/share/containers/oci/hooks.d/klock.json):
  {"version": "1.0.0",
   "hook": {"path": "/usr/local/bin/klock", "args": ["klock", "oci-hook"]},
   "when": {"annotations": {"^io\\.klock\\.manifest$": ".*"}},
   "stages": ["createRuntime", "poststop"]}`,
		Hidden:    true,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"createRuntime", "poststop"},
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := readHookState(cmd.InOrStdin())
			if err != nil {
				return err
			}
			stage := ""
			if len(args) == 1 {
				stage = args[0]
			} else {
				// One hooks.d file listing both stages runs the same argv
				// at each: the state says which it is.
				switch st.Status {
				case specs.StateCreating, specs.StateCreated:
					stage = "createRuntime"
				case specs.StateStopped:
					stage = "poststop"
				}
			}
			switch stage {
			case "createRuntime":
				spec, err := readBundleSpec(st)
				if err != nil {
					return err
				}
				return hookCreate(cmd.ErrOrStderr(), socket, config, st, spec)
			case "poststop":
				return hookPoststop(cmd.ErrOrStderr(), socket, st)
			}
			return fmt.Errorf("oci-hook: stage %q (container status %q): want createRuntime or poststop", stage, st.Status)
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "klockd's socket (default "+daemon.SocketPath()+")")
	c.Flags().StringVar(&config, "config", oci.DefaultConfigPath, "klock-runtime's configuration (manifest mappings)")
	return c
}

// readHookState reads the OCI state on stdin.
func readHookState(r io.Reader) (*specs.State, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("oci-hook: read the state on stdin: %w", err)
	}
	var st specs.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("oci-hook: the state on stdin is not OCI state JSON: %w (run by a container runtime, not by hand)", err)
	}
	if st.ID == "" || st.Bundle == "" {
		return nil, fmt.Errorf("oci-hook: the state on stdin names no container id or bundle")
	}
	return &st, nil
}

// readBundleSpec reads the container's config.json from its bundle.
func readBundleSpec(st *specs.State) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("oci-hook: container %s: %w", st.ID, err)
	}
	spec, err := oci.DecodeSpec(data)
	if err != nil {
		return nil, fmt.Errorf("oci-hook: container %s: %w", st.ID, err)
	}
	return spec, nil
}

func hookCreate(stderr io.Writer, socket, config string, st *specs.State, spec *specs.Spec) error {
	cfg, err := oci.LoadConfig(config)
	if err != nil {
		return fmt.Errorf("oci-hook: %w", err)
	}
	found, err := oci.Discover(spec, st.ID, cfg)
	if err != nil {
		return fmt.Errorf("oci-hook: container %s: %w", st.ID, err)
	}
	if found == nil {
		return nil // no manifest: not klock's container
	}
	if st.Pid <= 0 {
		return fmt.Errorf("oci-hook: container %s: the state names no init pid (run this hook at createRuntime)", st.ID)
	}
	pm, err := oci.NewPathMap(spec, st.Bundle)
	if err != nil {
		return fmt.Errorf("oci-hook: container %s: %w", st.ID, err)
	}
	if err := oci.CheckReach(found.Manifest, pm); err != nil {
		return fmt.Errorf("oci-hook: container %s: %w", st.ID, err)
	}
	req := oci.NewAdoptRequest(spec, st.ID, st.Bundle, found, pm)
	req.Pid = st.Pid
	cl, err := daemon.Dial(socket)
	if errors.Is(err, daemon.ErrNoDaemon) {
		return fmt.Errorf("oci-hook: container %s declares a manifest, and klockd is not running (%v): start it (klockd &, or its service) and start the container again; it is not started unwalled", st.ID, err)
	}
	if err != nil {
		return fmt.Errorf("oci-hook: %w", err)
	}
	defer cl.Close()
	info, err := cl.Adopt(req)
	if err != nil {
		return fmt.Errorf("oci-hook: container %s: klockd refused it: %w", st.ID, err)
	}
	fmt.Fprintf(stderr, "klock: container %s walled by session %s (%s mode)\n", st.ID, info.ID, info.Mode)
	return nil
}

func hookPoststop(stderr io.Writer, socket string, st *specs.State) error {
	defer os.RemoveAll(oci.StateDir(st.ID))
	cl, err := daemon.Dial(socket)
	if err != nil {
		return fmt.Errorf("oci-hook: %w", err)
	}
	defer cl.Close()
	res, err := cl.End(st.ID, 5*time.Minute)
	if errors.Is(err, daemon.ErrNoSession) {
		return nil // never adopted (no manifest, or createRuntime failed and said why)
	}
	if err != nil {
		return fmt.Errorf("oci-hook: container %s: %w", st.ID, err)
	}
	statedir.WriteOutcome(st.ID, oci.Outcome{Session: res.ID, Killed: res.Killed, Interrupted: res.Interrupted, Reason: res.Reason, Log: res.LogPath})
	verdict := "ended"
	if res.Killed {
		verdict = "killed: " + res.Reason
	}
	fmt.Fprintf(stderr, "klock: container %s session %s %s; log: %s\n", st.ID, res.ID, verdict, res.LogPath)
	return nil
}
