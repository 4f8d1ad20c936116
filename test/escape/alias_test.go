//go:build linux

package escape

import (
	"fmt"
	"os"
	"testing"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
	"github.com/klocklabs/klock/test/internal/harness"
)

// widened is a layout whose Landlock wall is wider than the declaration:
// out/ may be removed and made again (DELETES out/**), so the rule on
// out/ cannot stay with its inode and goes up to the workdir
// (enforcer/launch's settle.go). Landlock then lets the agent write every
// file of the workdir, ro.txt included, and link or rename any of them
// anywhere in it (its REFER check compares the workdir's rule with
// itself): only the observer and the engine stand between the agent and
// ro.txt, which it may only read. A file is its inode, not its name.
func widened(e *env) []string {
	out := e.W("out") + "/**"
	return []string{
		"CONSUMES FILE:" + e.Workdir + "/**",
		"PROVIDES FILE:" + out, "MUTATES FILE:" + out, "DELETES FILE:" + out,
		// ro.txt may be moved (not written): a rename into out/ would
		// give it MUTATES by its new name.
		"RENAMES FILE:" + e.W("ro.txt"),
	}
}

// aliasRows reach a CONSUMES-only file through a second name in a widened
// wall: a hard link, a rename, a symlink, /proc/self/fd, a dirfd, a file
// handle and a bind mount. Each is held: refused, or detected, killed and
// rolled back; no row can end CLEAN while a byte of ro.txt changed.
func aliasRows() []row {
	roBack := func(t *testing.T, e *env, o *harness.Outcome) {
		t.Helper()
		unchanged(ro, roContent)(t, e, o)
	}
	return []row{
		{
			name:  "read an outside file through /proc/self/root",
			why:   "the session's root seen through procfs is the session's root: the name below it is the file's (a baseline rule on /proc/self/** must not cover it); Landlock refuses the read on the inode",
			steps: steps(op("read", func(e *env) string { return "/proc/self/root" + e.O("secret.txt") })),
			want:  blocked, errno: "EACCES", triple: file("CONSUMES", secret),
			check: unchanged(secret, secretContent),
		},
		{
			name: "a hard link planted before the session from a writable name to a CONSUMES-only file, write through it",
			why:  "rw/planted and ro.txt were one inode when the session began: the manifest lets the agent write rw/planted, and that writes ro.txt. The backup knows the inode's names; the engine judges the write against each: detected, killed, rolled back (on both walls: each names the file by the name it was opened through)",
			setup: func(t *testing.T, e *env) {
				if err := os.Link(e.W("ro.txt"), e.W("rw", "planted")); err != nil {
					t.Fatal(err)
				}
			},
			steps: steps(op("write", at("rw", "planted"))),
			want:  detected, triple: file("MUTATES", ro), declared: "CONSUMES",
			via:   func(e *env) string { return "through the hard link " + e.W("rw", "planted") },
			check: changedTo(ro, harness.Payload, roContent),
			lsm: &row{want: detected, triple: file("MUTATES", ro), declared: "CONSUMES",
				via: func(e *env) string { return "through the hard link " + e.W("rw", "planted") },
				check: func(t *testing.T, e *env, o *harness.Outcome) {
					t.Helper()
					if o.Log.Mode == "permissive" {
						return
					}
					e.AssertRestored(o, map[string]string{e.W("ro.txt"): roContent})
				}},
		},
		hiddenLinkRow(),
		{
			name:    "widened wall: hard link of a CONSUMES-only file into the writable scope, write through it",
			why:     "Landlock lets the link through (one rule on the workdir covers both names); the engine applies REFER to the manifest: the new name carries MUTATES, which ro.txt lacks, so the link is MUTATES ro.txt through it: killed at the link, rolled back",
			intents: widened,
			steps:   steps(op("link", ro, at("out", "l")), op("write", at("out", "l"))),
			want:    detected, triple: file("MUTATES", ro), declared: "CONSUMES|RENAMES",
			via:   func(e *env) string { return "through the hard link " + e.W("out", "l") },
			check: changedTo(ro, harness.Payload, roContent),
			// bpf-lsm: path_link refuses the widening link with EXDEV, as
			// Landlock's REFER does, so tools copy instead: nothing
			// happened, in scope.
			lsm: &row{steps: steps(op("link", ro, at("out", "l"))), want: refusedInScope, errno: "EXDEV", check: roBack},
		},
		{
			name:    "widened wall: rename a CONSUMES-only file into the writable scope, write it there",
			why:     "RENAMES ro.txt is declared, MUTATES is not: a rename into out/ would give the inode MUTATES by its new name (REFER): killed; the rollback puts ro.txt back, content and name",
			intents: widened,
			steps:   steps(op("rename", ro, at("out", "r")), op("write", at("out", "r"))),
			want:    detected, triple: file("MUTATES", ro), declared: "CONSUMES|RENAMES",
			via: func(e *env) string { return "renamed to " + e.W("out", "r") },
			check: func(t *testing.T, e *env, o *harness.Outcome) {
				t.Helper()
				if harness.LSM() || o.Log.Mode != "permissive" {
					roBack(t, e, o)
					if !harness.LSM() {
						absent(at("out", "r"))(t, e, o)
					}
					return
				}
				if got := e.Content(e.W("out", "r")); got != harness.Payload {
					t.Errorf("out/r = %q, want the write landed (permissive)", got)
				}
			},
			lsm: &row{steps: steps(op("rename", ro, at("out", "r"))), want: refusedInScope, errno: "EXDEV", check: roBack},
		},
		{
			name:    "widened wall: symlink to a CONSUMES-only file, write through it",
			why:     "the wall lets the write through (the workdir's rule); the observer names the file the kernel opened, ro.txt, not the link",
			intents: widened,
			steps:   steps(op("symlink", ro, at("out", "sl")), op("write", at("out", "sl"))),
			want:    detected, triple: file("MUTATES", ro), declared: "CONSUMES|RENAMES",
			check: changedTo(ro, harness.Payload, roContent),
		},
		{
			name:    "widened wall: reopen a read-only fd for writing through /proc/self/fd",
			why:     "the reopen is a new open of ro.txt's inode, which the widened wall allows; the observer names the kernel's file, ro.txt",
			intents: widened,
			steps:   steps(op("reopen-write", ro)),
			want:    detected, triple: file("MUTATES", ro), declared: "CONSUMES|RENAMES",
			check: changedTo(ro, harness.Payload, roContent),
		},
		{
			name:    "widened wall: dirfd on out/, openat ../ro.txt for writing",
			why:     "openat from a dirfd in the writable scope reaches ro.txt; the observer names the kernel's file",
			intents: widened,
			steps:   steps(op("openat-write", at("out"), lit("../ro.txt"))),
			want:    detected, triple: file("MUTATES", ro), declared: "CONSUMES|RENAMES",
			check: changedTo(ro, harness.Payload, roContent),
		},
		{
			name:    "widened wall: open_by_handle_at a CONSUMES-only file for writing",
			why:     "opening by handle needs CAP_DAC_READ_SEARCH, which the agent never has: EPERM before any file is reached, nothing to judge",
			intents: widened,
			steps:   steps(op("by-handle-write", ro)),
			want:    refusedUnlogged, errno: "EPERM",
			check: roBack,
		},
		{
			name:    "widened wall: bind-mount a CONSUMES-only file over a writable name",
			why:     "mount needs CAP_SYS_ADMIN, which the agent never has (and seccomp refuses it): no second name is made",
			intents: widened,
			setup: func(t *testing.T, e *env) {
				e.File(e.W("out", "target"), "target\n")
			},
			steps: steps(op("bind-mount", ro, at("out", "target"))),
			want:  refusedUnlogged, errno: "EPERM",
			check: roBack,
		},
	}
}

// hiddenLinkRow writes through a hard link planted before the session,
// from a writable name to a file outside every scope: the backup finds one
// of the inode's two names.
func hiddenLinkRow() row {
	triple := func(e *env) string { return "MUTATES FILE:" + snapshot.FSRoot(e.O("secret.txt")) }
	via := func(e *env) string {
		return fmt.Sprintf("through %s, which had 1 more name(s) than klock's backup found when the session began (a hard link from outside its scopes, made before it): they lie somewhere on the file system at %s, which the manifest does not declare whole; remove the extra link before the session",
			e.W("rw", "hidden"), snapshot.FSRoot(e.O("secret.txt")))
	}
	return row{
		name: "a hard link planted before the session from a writable name to a file outside every scope, write through it",
		why:  "rw/hidden and the outside secret.txt were one inode when the session began, and the backup found one of its two names: a write through rw/hidden writes a file by a name nothing declares, somewhere on its file system. Judged as MUTATES of that file system's root, which nothing declares: detected, killed, and the content put back in place (one inode: the other name gets it back too); on both walls, each of which lets the write through by its declared name",
		setup: func(t *testing.T, e *env) {
			if err := os.Link(e.O("secret.txt"), e.W("rw", "hidden")); err != nil {
				t.Fatal(err)
			}
		},
		steps: steps(op("write", at("rw", "hidden"))),
		want:  detected, triple: triple, declared: "?", via: via,
		check: func(t *testing.T, e *env, o *harness.Outcome) {
			t.Helper()
			want := secretContent
			if o.Log.Mode == policy.ModePermissive {
				want = harness.Payload // the write landed
			}
			if got := e.Content(e.O("secret.txt")); got != want {
				t.Errorf("the outside secret.txt = %q, want %q", got, want)
			}
		},
		// bpf-lsm's file_open allows the write by its declared name too:
		// detected after it, as under Landlock.
		lsm: &row{want: detected, triple: triple, declared: "?", via: via},
	}
}
