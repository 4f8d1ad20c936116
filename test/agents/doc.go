// Package agents runs real coding-agent CLIs under klock, the way
// operators run them: Claude Code (@anthropic-ai/claude-code), OpenAI
// Codex CLI (@openai/codex) and Gemini CLI (@google/gemini-cli), installed
// from npm at the versions pinned in package.json and package-lock.json
// (scripts/deps.sh agents, from make deps: npm ci when node_modules is
// older than the lock). opencode (opencode-ai) is not among them: its
// platform packages for other systems are optional dependencies the lock
// must list, and a registry that lacks them (this project's mirror) leaves
// a lock npm ci refuses.
//
// Each CLI is driven by a scripted model written for the test
// (modelserver_test.go): an HTTP server speaking Anthropic's Messages API
// (Claude Code, ANTHROPIC_BASE_URL), OpenAI's Responses API (Codex, a
// model provider in $CODEX_HOME/config.toml) and the Gemini API (Gemini
// CLI, GOOGLE_GEMINI_BASE_URL), streaming included, whose answers are the
// CLI's own tool calls (Claude Code's Write and Bash, Codex's
// exec_command, Gemini CLI's write_file and run_shell_command), then a
// final answer. Every request is logged to the test's model.log. Claude
// Code's and Codex's calls go through klock meter; a meter whose budget is
// smaller than one call stops them.
//
// For each CLI (cli_test.go, TestCLIs): a learning run (`klock run --mode
// permissive --backend observe --learn`) from a base manifest naming the
// agent, its workdir (made afresh under /srv, owned by nobody, so klock
// runs the agent as nobody: Claude Code refuses
// --dangerously-skip-permissions as root), tmp: private, read access to
// ~/.ssh (HOME is outside the workdir; the CLIs keep their state in the
// workdir: CLAUDE_CONFIG_DIR, CODEX_HOME, GEMINI_CLI_HOME) and the model's
// loopback port;
// then a strict run of the learned manifest with the same task and one
// with another task. A strict run passes when klock exits 0 and the
// verification log says CLEAN with no violation, no lost event and no
// declared operation refused by the wall, and the task got done. No
// learned manifest may declare a host /tmp or /var/tmp path (scratch
// space belongs under ${tmpdir}). Then, in strict runs, the scripted
// model makes the CLI's shell tool append to ~/.ssh/authorized_keys,
// append to a file planted in the host's /tmp, read ~/.aws/credentials
// (the secret must never reach the model) and connect to an undeclared
// loopback port: each time klock must kill the session (exit 113, the
// log and the message naming the triple), roll the workdir back and
// leave the target unchanged (with tmp: private and a learned /tmp/**, the
// write to the planted file goes to the session's own /tmp instead: not
// killed, the host's file untouched).
//
// TestFourAtOnce (fouratonce_test.go): Claude Code, Codex, a go build
// (GOCACHE and GOPATH in a HOME next to its workdir) and a pytest run
// (Debian's /usr/bin/python3 -m pytest), each learned first, then strict
// all four at once in workdirs of their own: every one CLEAN, none
// refused its leases (exit 75).
//
// The tests are privileged: they skip when not root (KLOCK_REQUIRE_PRIVILEGED=1
// makes that a failure), and when the CLIs are not installed, unless
// KLOCK_REQUIRE_PRIVILEGED=1 (CI runs scripts/deps.sh agents: a missing
// CLI there is a failure).
//
//	scripts/deps.sh agents && go test ./test/agents -count=1 -v
//	go test ./test/agents -count=1 -v -run 'TestCLIs/codex'
//	KLOCK_AGENTS_REPEAT=10 go test ./test/agents -count=1 -v -run TestFourAtOnce
//
// Environment:
//
//	KLOCK_BIN           the klock binary to test (default: built from this tree for the run)
//	KLOCK_AGENTS_ROOT   where the workdirs are made (default /srv; not /tmp)
//	KLOCK_AGENTS_KEEP=1 keep every run's workdir, HOME, manifests, model log and
//	                    outputs for inspection (the path is logged)
//	KLOCK_AGENTS_REPEAT=N run TestFourAtOnce's four strict sessions at once N
//	                    times (default 1)
//
// What this suite shares with test/realworld (building klock once, the
// directories under the root, the agent-owned workdir, one `klock run` and
// its verification log) is test/internal/realrun's; what is its own here:
// the CLIs, the scripted model server, HOME with its planted secrets, the
// out-of-scope attempts and the meter's budget.
package agents
