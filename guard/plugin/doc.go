// Package plugin owns tool plugins (seed 004 §8): a directory holding a
// plugin manifest, plugin.json, with exactly the fields
//
//	{"name": "greet", "version": "1.0.0", "entry": "greet.sh",
//	 "capabilities": ["tool.greet.invoke"],
//	 "permissions": {"network": false, "filesystem": false, "internal_api": []}}
//
// and the program its entry names. The plugin serves the tool of its name,
// when the agent's manifest declares that tool and the plugin lists the
// tool's capability code.
//
// Every call runs the entry once, as a klock session (enforcer/session) in
// strict mode, as the unprivileged user nobody: the kernel wall lets it read
// its own directory and the system-ro baseline, execute only its entry (and
// the entry's #! interpreter), write nothing and reach no network. Its
// permissions can widen that: "filesystem": {"read": [...], "write": [...]}
// adds path patterns, "network": ["host:port/tcp", ...] adds destinations,
// "exec": ["/usr/bin/jq"] adds programs (absolute paths, no patterns). A
// #!/bin/sh entry's shell is its interpreter: it runs its builtins, and
// any program it starts that exec does not list is a violation that kills
// the session. Readable or writable paths never become executable: exec
// is PROC, never FILE.
//
// A plugin launches no shell (seed 004 §8.3). exec may not list one
// (ErrShell, at Load); and since the wall can only let a file execute or
// not, each session also runs an exec rule (session.Options.ExecVeto,
// shells.go): the entry's #! interpreter may be a shell once, as the
// kernel starts the entry; any other exec of a shell (sh -c, bash -c,
// exec sh, python's os.system, which runs /bin/sh -c) kills the session,
// tool_sandbox_violation. A shell is known by its inode or its bytes
// (Shells: /etc/shells and the usual shells' names, resolved, so a
// symlink, a hard link or a copy under another name is one); the limits
// are on Shells. The system-ro baseline a plugin reads (libraries,
// /usr, locale, certificates, the name-service files /etc/passwd and
// /etc/group) holds no home (/home, /root), no /etc/shadow, no other
// plugin's directory and no klock state: a read there kills the session.
// A plugin that breaks its scope is stopped by the kernel and klock kills
// its session. internal_api is accepted and recorded; klock gives plugins no
// internal service, so it grants nothing.
//
// The call protocol is JSON over the entry's stdin and stdout. stdin:
//
//	{"tool": "greet", "args": {...},
//	 "context": {"agent_run_id": "...", "team_id": "...", "capabilities": [...],
//	             "acts_as": "..."}}
//
// acts_as is the tool contract's permission.acts_as (absent when it
// declares none): the identity the plugin must act as, set by the gateway.
//
// stdout, one JSON object: {"output": ANY, "tokens_used": N, "cost": "0.01 USD"}
// (tokens_used and cost optional: a cost the plugin does not report is
// never invented), or {"error": "message"} for a failure of its own. Seed
// 004 §5.2's shape is accepted as written: {"ok": true, "output": ...,
// "tokens_used": 123, "cost_1t": 0.00002}, and {"ok": false, "error_class",
// "retryable", "message"} for a failure. cost_1t is read from the number's
// text, never a float, in Runner.Cost1TCurrency (USD unless set: the seed
// names no unit), rounded up to the currency's minor unit.
// A "breakdown" of named amounts ({"compute": "0.12 USD", "io": "0.03 USD"},
// or bare minor units beside a cost) is charged as its sum and kept for
// the receipt's cost_breakdown; one that disagrees with cost is refused.
//
// Error semantics: Load / LoadDir return ErrManifest naming the file, the
// field and the fix. Run returns a *toolerr.Error: tool_sandbox_violation
// when klock killed the session (the kernel stopped a write or connect
// outside its permissions), tool_internal_error for a non-zero exit, an
// unreadable answer or an answer over MaxOutput; a session that could not be
// started wraps gateway.ErrNotDispatched (its budget hold is released); the
// context's error when the call's deadline passed (the gateway reports
// tool_timeout).
package plugin
