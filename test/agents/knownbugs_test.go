//go:build linux

package agents

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// knownBug is a klock defect the suite has met with a real CLI: a
// violation that is klock's mistake, not the agent's. A strict run killed
// only for such violations skips, naming the bug, after logging every
// problem: the assertion stays, and the skip goes when klock is fixed.
type knownBug struct {
	name  string
	what  string
	match func(v vlog.Violation) bool
}

var tmpfileName = regexp.MustCompile(`/#\d+(/|$)`)

var knownBugs = []knownBug{
	{
		name: "OBSERVER_PROC_SELF_PATH",
		what: "the observer names what the agent reaches through /proc/self (a file under /proc/self/fd/N/<name>: Bun, Claude Code's runtime, renames and mkdirs there; an execve of /proc/self/exe: Codex re-executing itself) by that literal path instead of what it is: the learned manifest pins /proc/self/fd/N/<random name>, and the strict run is killed, e.g. \"ScopeViolationError: Agent attempted RENAMES on /proc/self/fd/12/new-0.txt.tmp.1.d0e8f3c44048 but only declared CONSUMES\" or, now and then (a race), \"ScopeViolationError: Agent attempted PROVIDES on /proc/self/exe but declared nothing there\"",
		match: func(v vlog.Violation) bool {
			return strings.HasPrefix(v.Path, "/proc/self/") || strings.Contains(v.Triple, ":/proc/self/")
		},
	},
	{
		name: "LEARN_OTMPFILE_INODE_NAME",
		what: "an unnamed file (O_TMPFILE: SQLite's temporary files, Codex's state databases) is observed under the kernel's name <dir>/#<inode> and learned as PROVIDES FILE:<dir>/#<inode>/** instead of the directory: the next run's file has another inode and is a violation, e.g. \"ScopeViolationError: Agent attempted PROVIDES on /var/tmp but declared nothing there\" (private /var/tmp) or \"... PROVIDES on <dir>/#1114522 but only declared CONSUMES\"",
		match: func(v vlog.Violation) bool {
			p := v.Path
			if p == "" {
				_, obj, _ := strings.Cut(v.Triple, " ")
				_, p, _ = strings.Cut(obj, ":")
			}
			return tmpfileName.MatchString(p) || strings.Contains(p, "/etilqs_") || v.Syscall == "open" && (p == "/var/tmp" || p == "/tmp")
		},
	},
	{
		name: "WALL_PROVIDES_WITHOUT_READ",
		what: "a file created with O_RDWR (Python's tempfile, SQLite) is judged PROVIDES alone, and the learned manifest declares only PROVIDES (and DELETES) there; but the Landlock wall grants PROVIDES no READ_FILE (enforcer/launch rightsFor), so the open of the new file is refused although declared (\"refused by the wall although declared: PROVIDES FILE:/tmp/7ih4vqac <- PROVIDES FILE:/tmp/*\"), in a private /tmp or the host's alike; Python then falls back to /var/tmp, a violation (\"ScopeViolationError: Agent attempted PROVIDES on /var/tmp/csw2rynr but declared nothing there\"). Reproduced with a manifest of PROVIDES and DELETES FILE:/tmp/* and python3 -c 'os.open(\"/tmp/x\", os.O_RDWR|os.O_CREAT|os.O_EXCL)': EACCES",
		// Matched in knownBugsOf: it needs the run's refusals.
		match: func(v vlog.Violation) bool { return false },
	},
	{
		name: "PRIVATE_TMP_HOST_PATH",
		what: "a change in the session's private /tmp (a chmod of Claude Code's cc-socks/N.sock) is named by its host path /var/lib/klock/tmp/<session>/tmp/...: learned with one session's id, a violation in every other session, e.g. \"ScopeViolationError: Agent attempted MUTATES on /var/lib/klock/tmp/20261128T151622-3d8bd4/tmp/cc-socks/1.sock but declared nothing there\"",
		match: func(v vlog.Violation) bool {
			return strings.HasPrefix(v.Path, "/var/lib/klock/tmp/") || strings.Contains(v.Triple, "FILE:/var/lib/klock/tmp/")
		},
	},
}

// knownBugsOf names the known bugs r's violations are, when every one of
// them is one ("" when there is none, or one of them is not a known bug).
func knownBugsOf(r *run) string {
	if r.log == nil || len(r.log.Violations) == 0 && len(r.refusedDeclared()) == 0 {
		return ""
	}
	names := map[string]bool{}
	var order []string
	add := func(h string) {
		if !names[h] {
			names[h] = true
			order = append(order, h)
		}
	}
	// A create refused although declared: its program may then try
	// elsewhere (Python's tempfile: /tmp, then /var/tmp, then /usr/tmp).
	createRefused := false
	for _, o := range r.refusedDeclared() {
		if !strings.HasPrefix(o.Triple, "PROVIDES FILE:") {
			return ""
		}
		createRefused = true
		add("WALL_PROVIDES_WITHOUT_READ")
	}
	for _, v := range r.log.Violations {
		var hits []string
		for _, b := range knownBugs {
			if b.match(v) {
				hits = append(hits, b.name)
			}
		}
		if createRefused && (strings.HasPrefix(v.Path, "/var/tmp/") || strings.HasPrefix(v.Path, "/tmp/") || strings.HasPrefix(v.Path, "/usr/tmp/")) {
			hits = append(hits, "WALL_PROVIDES_WITHOUT_READ")
		}
		if len(hits) == 0 {
			return ""
		}
		for _, h := range hits {
			add(h)
		}
	}
	return strings.Join(order, ", ")
}

// skipIfKnownBug skips t when r failed only for known klock bugs, naming
// them (the problems were logged by the caller).
func skipIfKnownBug(t *testing.T, r *run) {
	t.Helper()
	names := knownBugsOf(r)
	if names == "" {
		return
	}
	var b strings.Builder
	for _, k := range knownBugs {
		if strings.Contains(names, k.name) {
			fmt.Fprintf(&b, "\n  %s: %s", k.name, k.what)
		}
	}
	kill := "not killed"
	if r.log.Exit.KilledByKlock {
		kill = "killed: " + r.log.Exit.Reason
	}
	t.Skipf("KNOWN KLOCK BUG %s: %s fails only for klock's mistakes, not the agent's (exit %s; %s)%s", names, r.step, exitMeaning(r.exit), kill, b.String())
}
