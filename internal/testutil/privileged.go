package testutil

import (
	"os"
	"testing"
)

// RequireEnv is the variable that turns every privileged skip into a failure
// (set by .ci/run and the VM harness) so nothing passes by skipping.
const RequireEnv = "KLOCK_REQUIRE_PRIVILEGED"

// Required reports whether skips of privileged tests are forbidden.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// RequirePrivileged skips t when not running as root, or fails it when
// KLOCK_REQUIRE_PRIVILEGED=1.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	Unavailable(t, "needs root (run the privileged tests with sudo, or `make test` as root)")
}

// Unavailable skips t for a missing capability, or fails it when
// KLOCK_REQUIRE_PRIVILEGED=1.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s=1 forbids skipping: %s", RequireEnv, why)
	}
	t.Skip(why)
}
