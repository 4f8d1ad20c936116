// Package oci is klock-runtime's logic, without klockd and without running
// anything: it reads the runtime's own configuration (/etc/klock/runtime.yaml,
// LoadConfig), finds the manifest a container is to run under (Discover:
// the io.klock.manifest annotation, else a mapping of the configuration),
// maps container paths to host paths through the spec's mounts (PathMap),
// refuses a manifest whose changing intents the mounts do not reach
// (CheckReach), and rewrites an OCI runtime spec so the container runs
// under klock (Rewrite: klock's hooks, no capabilities, no_new_privs, a
// non-root user, klock's seccomp deny list merged without widening the
// container's own profile, a read-only tmpfs over the workdir's .klock, and
// the Landlock stage 2 prefixed to process.args, with the tmpfs its
// canaries use).
//
// cmd/klock-runtime does the I/O around it (config.json, the state
// directory, exec of the real runtime); klock's oci-hook and klockd consume
// the annotations and the PathMap it sets up.
//
// # Errors
//
// Every error wraps one of the sentinels below, so callers branch with
// errors.Is: ErrConfig (runtime.yaml; a *ConfigError located at
// file:line:col), ErrManifestRequired (no manifest and require: true),
// ErrManifest (a manifest that cannot be read or does not validate; the
// policy package's *policy.ValidationError is wrapped, located at
// file:line:col), ErrUnreachable (a *ReachError naming each intent, its
// container path and the mounts that could carry it), ErrBadSpec (a spec
// or Plan klock cannot rewrite), and ErrSpecFields (a config.json with
// fields this build's runtime-spec does not know, which a rewrite would
// silently drop).
package oci
