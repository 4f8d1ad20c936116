// Package deploy checks the installation files in deploy/: the Kubernetes
// objects decode strictly into their k8s.io/api types (an unknown or
// misspelt field is an error, as `kubectl apply --validate=strict` makes
// it), containerd's runtime handler decodes strictly with go-toml, and the
// names that tie them together agree: the RuntimeClass's handler is
// containerd's runtime, the handler's BinaryName is where the DaemonSet
// installs klock-runtime, and klockd sees the node's paths where klock
// looks for them. The end-to-end run through containerd's CRI plugin is
// test/cri.
package deploy
