//go:build linux

package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/klocklabs/klock/enforcer/lease"
)

const privateLeasesEnv = "KLOCK_TEST_PRIVATE_LEASES"

// InPrivateLeaseStore runs the test binary (as root) in a mount namespace
// of its own with an empty tmpfs on the host's lease store
// (lease.DefaultHostDir): the klock processes a suite starts (gateways,
// klock run) lease among themselves and never hold what another test
// package's sessions need at the same moment (go test runs packages in
// parallel on one host store). Call it first in TestMain: in the parent
// it re-executes the binary in the new namespace and returns done with
// the child's exit status; in the child (and when not root) it returns
// done=false and the tests run.
func InPrivateLeaseStore() (code int, done bool) {
	if os.Geteuid() != 0 {
		return 0, false
	}
	if os.Getenv(privateLeasesEnv) == "1" {
		if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			fmt.Fprintln(os.Stderr, "harness: make the mounts private:", err)
			return 2, true
		}
		if err := os.MkdirAll(lease.DefaultHostDir, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, "harness:", err)
			return 2, true
		}
		if err := syscall.Mount("test-leases", lease.DefaultHostDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "mode=0700"); err != nil {
			fmt.Fprintln(os.Stderr, "harness: mount a private lease store:", err)
			return 2, true
		}
		return 0, false
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		return 2, true
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), privateLeasesEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &ee):
		return ee.ExitCode(), true
	}
	fmt.Fprintln(os.Stderr, "harness: run in a private mount namespace:", err)
	return 2, true
}
