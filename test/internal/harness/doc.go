// Package harness runs real klock sessions for the end-to-end and escape
// suites (test/e2e, test/escape): it builds a world of agent-owned files, a
// manifest parsed with policy.Parse, runs the session in-process through
// session.Run, reads the verification log back from disk, and offers a
// probe (the test binary itself, re-executed as the agent) that performs
// single system calls and prints their exact outcome.
//
// It never decides what is allowed and never talks to the kernel outside a
// session; every assertion about klock's behaviour lives in the suites.
package harness
