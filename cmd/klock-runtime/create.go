package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/oci"
)

// validID is runc's container id syntax; the id names a state directory,
// so nothing else (no "/", no "..") is accepted.
var validID = regexp.MustCompile(`^[\w+\-.]+$`)

// prepare is create's and run's part: find the manifest; without one leave
// the bundle exactly as it is (not even re-marshalled); with one validate
// it, check its paths reach the host, set up the state directory, and
// rewrite config.json in place. It returns the container's state
// directory, "" when the container is not klock's.
func prepare(inv *invocation, cfg *oci.Config) (string, error) {
	bundle, id, err := bundleAndID(inv.args)
	if err != nil {
		return "", fmt.Errorf("%s: %w", inv.command, err)
	}
	if bundle, err = filepath.Abs(bundle); err != nil {
		return "", err
	}
	cfgFile := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(cfgFile)
	if err != nil {
		return "", fmt.Errorf("read the bundle's spec: %w", err)
	}
	// A lenient read finds the annotations; the strict one (which refuses
	// fields a rewrite would drop) is for the containers klock rewrites.
	var loose specs.Spec
	if err := json.Unmarshal(data, &loose); err != nil {
		return "", fmt.Errorf("%s: %w: %w", cfgFile, oci.ErrBadSpec, err)
	}
	found, err := oci.Discover(&loose, id, cfg)
	if err != nil || found == nil {
		return "", err
	}
	spec, err := oci.DecodeSpec(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cfgFile, err)
	}
	if !validID.MatchString(id) || id == "." || id == ".." {
		return "", fmt.Errorf("container id %q: klock-runtime takes ids of letters, digits and + - . _ (runc's syntax)", id)
	}
	pm, err := oci.NewPathMap(spec, bundle)
	if err != nil {
		return "", err
	}
	m := found.Manifest
	if err := oci.CheckReach(m, pm); err != nil {
		return "", fmt.Errorf("container %s, manifest from %s: %w", id, found.Source, err)
	}
	klock, stage2, err := findBinaries()
	if err != nil {
		return "", err
	}
	stateDir, err := makeStateDir(id, stage2)
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(stateDir)
		}
	}()
	plan := oci.Plan{
		KlockPath: klock, StateDir: stateDir, Landlock: true,
		AllowRoot: oci.AllowRoot(spec, cfg), Workdir: m.Workdir, ManifestAnnotation: found.Annotation(),
	}
	if err := oci.Rewrite(spec, plan); err != nil {
		return "", err
	}
	// What exec needs to treat the container's later processes as Rewrite
	// treated its first (exec.go).
	if err := writeExecPolicy(stateDir, execPolicy{AllowRoot: plan.AllowRoot}); err != nil {
		return "", err
	}
	if err := writeAdopt(stateDir, spec, id, bundle, found); err != nil {
		return "", err
	}
	// The wall itself (wall.json) is written by the container's session
	// in klockd, at createRuntime, once it knows what walls the files:
	// Landlock planned on the container's mounts, or bpf-lsm from outside.
	// Until then klock-stage2 refuses to start the entrypoint.
	out, err := oci.EncodeSpec(spec)
	if err != nil {
		return "", err
	}
	if err := writeAtomic(cfgFile, out); err != nil {
		return "", fmt.Errorf("rewrite %s: %w", cfgFile, err)
	}
	ok = true
	return stateDir, nil
}

// writeAdopt prepares the createRuntime hook's request to klockd from the
// rewritten spec (what the runtime will run), so that the hook, which the
// light klock front serves, only adds the init's pid and sends it: the
// manifest is parsed and checked here, once.
func writeAdopt(stateDir string, spec *specs.Spec, id, bundle string, found *oci.Found) error {
	pm, err := oci.NewPathMap(spec, bundle)
	if err != nil {
		return err
	}
	if err := oci.CheckReach(found.Manifest, pm); err != nil {
		return fmt.Errorf("container %s, manifest from %s: %w", id, found.Source, err)
	}
	return writeStateFile(stateDir, oci.AdoptFileName, oci.NewAdoptRequest(spec, id, bundle, found, pm))
}

// writeAtomic replaces file with data: a temporary file in the same
// directory renamed over it, with the old file's mode, so the runtime
// never reads half a config.json (or process.json). Not fsynced: the
// rename alone makes the new file whole for every reader, and nothing
// reads it after a crash (the container does not survive one; the engine
// writes a new bundle for the next create), so a sync would only add a
// disk flush (~1 ms) to every container's start.
func writeAtomic(file string, data []byte) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(file); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".klock-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
