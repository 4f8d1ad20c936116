// Package brokenwall says whether this is the test build whose walls
// enforce nothing (go build -tags klocktest_brokenwall): stage 2 builds
// its Landlock ruleset but never enforces it, and bpf-lsm's rules grant
// everything. It exists so that a test can prove the canaries (the
// operations each wall must refuse before the agent runs) catch a wall
// that silently does nothing, on every kernel. In every other build On
// is a false constant, and the code it guards is compiled out.
package brokenwall
