// Package realrun is what the suites that run real programs under
// `klock run` (test/realworld: toolchains; test/agents: coding-agent
// CLIs) share, so that each of them keeps only what is its own:
//
//   - the klock under test: $KLOCK_BIN, else klock and klock-stage2 built
//     from this tree once per test binary (Suite.Klock), removed when the
//     binary ends (Main, from the suite's TestMain);
//   - where a suite makes its directories (Suite.RootBase: the suite's
//     *_ROOT variable, else /srv) and its per-test root (Suite.Root:
//     traversable by the agent user, removed unless the suite's *_KEEP
//     variable is 1);
//   - one agent's area (Area): a workdir made afresh at the same path for
//     every run, owned by the agent user (nobody, uid 65534), with the
//     directories and files a test plants in it, moved aside after a run;
//   - one `klock run` (Area.KlockRun, Run): its exit status and what it
//     means, its output, its verification log read back, and the reasons a
//     strict run is not a clean pass (Run.Problems).
//
// The suites' own environment variables (KLOCK_REALWORLD_*,
// KLOCK_AGENTS_*) are named by the suites, in a Suite value, and documented
// in their doc.go files.
package realrun
