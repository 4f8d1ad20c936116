// Package celexpr compiles and runs the manifests' autonomy conditions
// (a tool contract's autonomy.unsupervised_if, seed 002) with cel-go.
//
// It is kept out of package policy, which reads and checks manifests,
// because cel-go and the protobuf runtime it brings cost about a third of
// the start of a binary that links them (1.2 ms of CPU on the development
// machine) and ten megabytes of it: klock-runtime, run several times per
// container by engines, parses manifests but never runs a condition.
// Binaries that check or run conditions install it with
// policy.UseConditions(celexpr.Compiler{}): klockd and klock-cli do in
// main, guard/check (which runs them) in its init. It imports nothing of
// klock's, so package policy's own tests can install it too.
//
// Errors are cel-go's, wrapped with what was being compiled.
package celexpr
