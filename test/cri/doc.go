// Package cri runs klock's Kubernetes path below the kubelet: the calls a
// kubelet makes for a pod of RuntimeClass klock (k8s.io/cri-api's
// RunPodSandbox with runtime_handler klock, CreateContainer,
// StartContainer), made against containerd's CRI plugin, whose klock
// runtime is deploy/containerd/klock-runtime.toml as shipped but for
// BinaryName (the tree's klock-runtime, through a script naming the
// test's klockd) and the shim's state directory. The pod shares the
// node's network (no CNI), its sandbox image is a pause-like image built
// and imported in the test (no registry). The agent container's manifest
// comes from runtime.yaml by the container's name, or from a pod
// annotation (which reaches the sandbox too, and klock leaves the sandbox
// alone); ExecSync is kubectl exec's call. klockd runs in the test process
// (test/internal/harness). The kubelet itself, the DaemonSet and CRI-O are
// not run here.
package cri
