package main

// helpText is klock-runtime --help: what it is, how a container names its
// manifest, runtime.yaml, and how to install it in each engine.
const helpText = `klock-runtime: an OCI runtime that runs containers under klock.

It stands in for runc, or crun. Every command passes through to the real runtime
unchanged. On create and run it reads the bundle's config.json and looks for
the container's klock manifest; a container with none runs untouched (its
config.json is not rewritten, byte for byte), unless runtime.yaml says
require: true, then it is refused. With a manifest it validates it, checks
that every path the manifest lets the agent change is on a bind mount (or the
root filesystem) so klock can back it up and roll it back, and rewrites
config.json in place:
  - klock's createRuntime and poststop hooks (klock oci-hook; klockd must run:
    it takes the leases and the backup, loads the kernel wall on the
    container's cgroup, and ends the session with its verification log);
  - no capabilities, no_new_privs, uid/gid 0 become 65534 (unless allowed);
  - klock's seccomp deny list merged into the container's profile (never
    widening it);
  - a read-only tmpfs over <workdir>/.klock (klock's state, not the agent's);
  - klock-stage2, bound read-only at /dev/.klock, runs first and raises the
    Landlock wall before the entrypoint's first instruction.
Then it execs the real runtime with the same arguments.

On exec into a container it prepared (its state directory under
/run/klock/containers), the new process goes through klock-stage2 too,
with no_new_privs, no capabilities and (unless root is allowed) uid/gid 0
made 65534: exec --process FILE (podman,
containerd, Docker) has FILE rewritten in place; runc exec ID CMD... gets
--no-new-privs and the stage-2 prefix before CMD. --cap is refused there,
and so is a flag runc 1.1's exec does not have (the container id would be
a guess). Any other container's exec passes through untouched.

Manifests name paths as the agent sees them inside the container
(workdir: /workspace, MUTATES FILE:/workspace/src/**).

Usage:
  klock-runtime [runc's global flags] [--runtime=runc|crun] [--runtime-path=PATH]
                [--klock-config=FILE] COMMAND [args...]

  --runtime=runc|crun   the real OCI runtime by name, found on PATH (or in
                        /usr/sbin, /usr/bin...); removed from the arguments
                        the runtime sees
  --runtime-path=PATH   the real OCI runtime by path; removed too
                        Neither given: runtime_path, else runtime, in
                        runtime.yaml; else runc on PATH; else crun. A named
                        runtime that is missing is an error saying what
                        to install.
  --klock-config=FILE   runtime.yaml elsewhere than /etc/klock/runtime.yaml;
                        removed from the arguments the runtime sees
  runc's global flags (--root, --log, --log-format, --systemd-cgroup, --debug,
  --criu, --rootless) and crun's (--cgroup-manager, --log-level) pass through; errors also go to the --log file, in JSON
  with --log-format=json, where containerd and podman read them.

Annotations:
  io.klock.manifest=/etc/klock/agents/coder.yaml   a host path (one line
                        starting with /), or the manifest itself (inline YAML)
  io.klock.allow-root=true   keep uid/gid 0 (the agent still has no
                        capabilities)
  klock-runtime sets io.klock.runtime=klock-runtime on the containers it
  rewrote (the hooks alone, from hooks.d, run without it: no Landlock inside).

/etc/klock/runtime.yaml (optional; unknown fields are errors):
  runtime_path: /usr/bin/runc     # the real runtime (default: runc on PATH)
  runtime: crun                   # or by name: runc or crun, found on PATH
  require: false                  # true: refuse containers with no manifest
  allow_root: false               # true: keep uid/gid 0 in every container
  manifests:                      # first match wins; both conditions must hold
    - match: {id: "agent-*"}                              # container id glob
      manifest: /etc/klock/agents/coder.yaml
    - match: {annotation: "io.kubernetes.cri.container-name=agent"}
      manifest: /etc/klock/agents/agent.yaml

klock-runtime runs as root (it prepares /run/klock/containers/<id>) and finds
klock and klock-stage2 beside itself, else beside klock on PATH.

Install:
  Docker, /etc/docker/daemon.json (then: systemctl restart docker):
    {"runtimes": {"klock": {"path": "/usr/local/bin/klock-runtime",
                            "runtimeArgs": ["--runtime-path=/usr/bin/runc"]}}}
    (in front of crun: "runtimeArgs": ["--runtime=crun"])
    docker run --runtime klock \
      --annotation io.klock.manifest=/etc/klock/agents/coder.yaml \
      -v /srv/repo:/workspace IMAGE
    (--annotation needs Docker 24 / API 1.43; with an older engine, whose
    annotations never reach the spec, name the manifest in runtime.yaml:
    manifests: [{match: {id: "*"}, manifest: ...}], or a runtime per agent
    with "--klock-config=FILE" in its runtimeArgs)

  Podman:
    podman run --runtime /usr/local/bin/klock-runtime \
      --annotation io.klock.manifest=/etc/klock/agents/coder.yaml \
      -v /srv/repo:/workspace IMAGE

  containerd, /etc/containerd/config.toml (the runc shim runs BinaryName):
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.klock]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["io.klock.*"]
      container_annotations = ["io.klock.*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.klock.options]
        BinaryName = "/usr/local/bin/klock-runtime"
    ctr run --runtime io.containerd.runc.v2 \
      --runc-binary /usr/local/bin/klock-runtime ...

  CRI-O, /etc/crio/crio.conf.d/50-klock.conf:
    [crio.runtime.runtimes.klock]
    runtime_path = "/usr/local/bin/klock-runtime"
    allowed_annotations = ["io.klock.manifest", "io.klock.allow-root"]

  Kubernetes (containerd or CRI-O configured as above on every node):
    apiVersion: node.k8s.io/v1
    kind: RuntimeClass
    metadata: {name: klock}
    handler: klock
    ---
    # in the pod: spec.runtimeClassName: klock and
    # metadata.annotations: {io.klock.manifest: /etc/klock/agents/coder.yaml}
`
