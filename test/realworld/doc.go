// Package realworld runs real toolchains under klock the way a new user
// would: for each workload (git, Python, Node, C,
// shell, Go in workloads_test.go; pip building a local project, npm with
// local dependencies and npm ci, make -j2 with an install into a prefix,
// the shell's file tools, git from clone to am, go with its caches in a
// home outside the workdir in tools_test.go) a learning run (`klock run --mode permissive --backend observe
// --learn`) from a base manifest that names only the agent and its workdir,
// then a strict run with the learned manifest unchanged, then a strict run
// with different input. Every run gets a fresh workdir at the same path,
// owned by the agent user (nobody), so `klock run` runs the agent as that
// user. A strict run passes when klock exits 0, the verification log says
// CLEAN with no violation, no lost event and no declared operation refused
// by the wall, and the workload's own check (the program ran, the commit
// exists, the import works) passes.
//
// The tests are privileged: they skip when not root (KLOCK_REQUIRE_PRIVILEGED=1
// makes that a failure) and when a toolchain is missing (scripts/deps.sh
// realworld installs them).
//
//	go test ./test/realworld -count=1 -v                    # every workload
//	go test ./test/realworld -count=1 -v -run 'RealWorld/git' # one workload
//
// Flags (after the package): -realworld.only=git,shell runs only the named
// workloads, in that order; a name no workload has fails the run.
//
// Environment:
//
//	KLOCK_BIN            the klock binary to test (default: built from this tree for the run)
//	KLOCK_REALWORLD_ROOT where the workdirs are made (default /srv; not /tmp, which
//	                     the agents use as scratch space and klock treats specially)
//	KLOCK_REALWORLD_KEEP=1 keep every step's workdir, manifests and outputs for
//	                     inspection (the path is logged)
//	KLOCK_REALWORLD_DIAGNOSE=0 do not rerun a failed strict step in permissive mode
//	                     with no wall; by default that rerun lists everything the
//	                     learned manifest does not cover for the step's input (the
//	                     strict run stops at the first violation)
//
// What this suite shares with test/agents (building klock once, the
// directories under the root, the agent-owned workdir, one `klock run` and
// its verification log) is test/internal/realrun's; what is its own here:
// the workloads, the learned-intent analysis of a failed strict run and the
// permissive rerun that lists what the learned manifest does not cover.
//
// The suite runs on the host's own /tmp and lease store, beside whatever
// else runs there: every session's /tmp is private (the default), so the
// learned scratch scopes lease nothing and a rollback never reaches
// another process's files.
package realworld
