//go:build klocktest_brokenwall

package brokenwall

// On: this build's walls enforce nothing. Never ship it: its Build
// differs from every release's, so a released klock refuses its stage 2.
const On = true
