// Package tools holds klock's HTTP tool proxy tests: the klock binary's
// `klock tools serve` with real plugins (shell programs) run under kernel
// enforcement, called over HTTP, governed with `klock tools`, audited and
// charged. They need root (kernel enforcement).
package tools
