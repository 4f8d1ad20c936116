// Package ctrtest drives real container runtimes for klock's container
// tests (test/container): it builds a busybox root filesystem and OCI
// bundles (BusyboxRootfs, NewBundle with runtime-spec's specs.Spec), runs
// them with runc or any OCI runtime in its place (RunC; Create, Start,
// Wait, Delete), gives each test a private podman (Podman), containerd
// (Containerd) and dockerd (Docker), and records what an engine does:
// hook calls (Recorder, WriteHooksD) and runtime invocations
// (RuntimeRecorder). It asserts nothing about klock. Everything is private
// to the test and removed at its end: runc --root, podman --root/--runroot/
// --tmpdir/--network-config-dir, the daemons' roots and sockets.
//
// Skips: no root, no runc/podman/containerd/ctr/dockerd, no /bin/busybox
// are testutil.Unavailable (a failure under KLOCK_REQUIRE_PRIVILEGED=1;
// scripts/deps.sh containers installs them all). A containerd or dockerd
// that cannot start on the machine (exits, or does not serve within a
// minute) is t.Skip even then, saying why with the log's tail.
//
// # What the machine does (Debian 12 packages: runc 1.1.5, podman 4.3.1,
// crun 1.8.1, containerd 1.6.20, docker.io 20.10.24; no systemd as init,
// cgroup v1 controllers with the v2 hierarchy at /sys/fs/cgroup/unified)
//
// runc runs a bundle as is. Podman's default runtime, crun, refuses the
// hybrid hierarchy ("cgroups in hybrid mode not supported"), so every
// podman command here passes --runtime (runc by default; a test sets
// klock-runtime), and --cgroup-manager cgroupfs, --events-backend file,
// --storage-driver overlay, all under a short directory (podman refuses a
// --runroot over 50 characters). Podman's default RLIMIT_NOFILE (1048576) is
// above the hard limit root may set here, so plain `podman run` fails in
// runc ("error setting rlimit type 7"); Run always passes
// --ulimit nofile=1024:1024 --ulimit nproc=1024:1024. Podman's network
// backend is CNI (containernetworking-plugins; netavark is not needed):
// --network none, or Bridge's private bridge (the default network leaves
// cni-podman0 and a CNI-FORWARD chain on the host). containerd starts as
// a plain background process with its own config (CRI off) and runs
// `ctr image import` of OCIArchive + `ctr run --runc-binary`; its shim
// still uses /run/containerd/{runc/<ns>,s,fifo}. dockerd (docker.io)
// starts with --bridge none --iptables=false and its own containerd; its
// API is 1.41: no --annotation (a newer CLI says it "requires API version
// 1.43"), labels do not reach the spec, so a manifest reaches a Docker
// container through runtime.yaml or daemon.json runtimeArgs, which dockerd
// puts first: `ARGS --root R --log L --log-format json create ...`.
//
// How engines call the runtime: podman `create --bundle B --pid-file P ID`,
// `start ID`, `delete --force ID` (no global flags; runc's default
// /run/runc root); containerd and dockerd prefix `--root R --log L
// --log-format json` and call create, start, delete, delete --force.
// root.path is the bundle's relative "rootfs" for runc and containerd, an
// absolute overlay "merged" dir for podman and docker. Annotations reach
// the spec from podman --annotation and ctr run --annotation. cgroupsPath:
// runc's default "/<id>", podman "/libpod_parent/libpod-<id>", containerd
// "/<namespace>/<id>", docker "/docker/<id>"; the same path in every v1
// controller and in the v2 hierarchy (mounted at /sys/fs/cgroup/unified
// here, /sys/fs/cgroup on a v2-only host: the cgroup id for BPF is that
// directory's inode).
//
// What a hook sees. createRuntime (run by runc after it made the
// namespaces, before pivot_root): the state {status "creating", pid, id,
// bundle, annotations} on stdin; the pid is runc's init (comm
// "runc:[2:INIT]"), already in the container's cgroup in every hierarchy,
// in the container's pid/mnt/net/ipc/uts namespaces, root still the host's
// "/", full capabilities, no no_new_privs, no seccomp yet. cwd is the
// bundle; env is exactly the hook's env, or runc's whole environment when
// the hook has none. A failing createRuntime hook fails create/run (exit 1,
// runc quotes the hook's stdout and stderr) and runc still runs the
// poststop hooks. poststop (runc: at delete, or at the end of run): status
// "stopped", no pid. Through podman's hooks.d (schema 1.0.0, --hooks-dir,
// `when.annotations` matched against the container's), createRuntime is
// put in the spec and run by runc as above (its env adds conmon's
// _OCI_SYNCPIPE and friends only when the hook has no env), but poststop is
// run by podman itself after the runtime's delete, when the container
// exits (with or without --rm, killed too): cwd podman's, env the hook's
// alone, annotations podman's subset. One hooks.d file gives the
// same argv at every stage it lists, so a hook must tell the stage from
// state.status (creating / stopped) or use one file per stage.
package ctrtest
