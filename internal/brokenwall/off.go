//go:build !klocktest_brokenwall

package brokenwall

// On: this build's walls enforce nothing.
const On = false
