// Package testutil holds helpers shared by klock's tests: the privileged-test
// gate. It never touches the kernel itself.
package testutil
