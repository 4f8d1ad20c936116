//go:build linux

package escape

import (
	"os"
	"strings"
	"testing"

	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// Metadata changed by ioctl, and code run without an
// exec.

// flagBits are the inode flags the probe's ioctls add (nodump, noatime).
const flagBits = harness.FsNodumpFl | harness.FsNoatimeFl

// flagsOf reads p's inode flags, skipping the row on a file system that
// has none.
func flagsOf(t *testing.T, p string) uint32 {
	t.Helper()
	f, ok := harness.Flags(p)
	if !ok {
		t.Skipf("%s: no inode flags on this file system", p)
	}
	return f
}

// flagsUntouched: the ioctl was refused before its effect.
func flagsUntouched(p func(e *env) string) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, _ *harness.Outcome) {
		t.Helper()
		if f := flagsOf(t, p(e)); f&flagBits != 0 {
			t.Errorf("%s flags %#x: the refused ioctl set nodump/noatime", p(e), f)
		}
	}
}

// flagsSet: the ioctl landed (an allowed control).
func flagsSet(p func(e *env) string, bits uint32) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, _ *harness.Outcome) {
		t.Helper()
		if f := flagsOf(t, p(e)); f&bits != bits {
			t.Errorf("%s flags %#x, want %#x set (the ioctl is in scope)", p(e), f, bits)
		}
	}
}

// flagsChanged checks a detected metadata ioctl on p: refused before the
// effect on bpf-lsm; landed in permissive mode on the Landlock host; in
// strict mode undone by the kill's rollback (snapshot/ records and
// restores inode flags).
func flagsChanged(p func(e *env) string, bits uint32) func(*testing.T, *env, *harness.Outcome) {
	return func(t *testing.T, e *env, o *harness.Outcome) {
		t.Helper()
		f := flagsOf(t, p(e))
		switch {
		case harness.LSM():
			if f&flagBits != 0 {
				t.Errorf("%s flags %#x, want untouched (bpf-lsm's file_ioctl refuses before the effect)", p(e), f)
			}
		case o.Log.Mode != policy.ModeStrict:
			if f&bits != bits {
				t.Errorf("%s flags %#x, want %#x (the ioctl landed)", p(e), f, bits)
			}
		case f&flagBits == 0:
		default:
			t.Errorf("%s flags %#x after the strict kill, want nodump/noatime undone", p(e), f)
		}
	}
}

// consumesOnly declares no MUTATES anywhere: the seccomp filter then
// refuses metadata ioctls outright.
func consumesOnly(e *env) []string {
	return []string{"CONSUMES FILE:" + e.Workdir + "/**", "PROVIDES FILE:" + e.W("out") + "/**"}
}

func metaIoctlRows(t *testing.T) []row {
	outDir := func(e *env) string { return e.W("out") }
	return []row{
		{
			name:  "FS_IOC_SETFLAGS on a read-only fd of a CONSUMES-only file",
			why:   "the owner may set nodump/noatime through any descriptor, and Landlock walls ioctls on devices only; the manifest declares MUTATES elsewhere, so seccomp lets the ioctl through and the tracepoints report MUTATES of the fd's file: detected, killed (bpf-lsm's file_ioctl refuses it)",
			steps: steps(op("setflags", ro)),
			want:  detected, triple: file("MUTATES", ro), declared: "CONSUMES",
			check: flagsChanged(ro, flagBits),
		},
		{
			name:  "FS_IOC_SETFLAGS on a directory the agent may only create in",
			why:   "as on a file: the directory's own flags are MUTATES of it",
			steps: steps(op("setflags-dir", outDir)),
			want:  detected, triple: file("MUTATES", outDir), declared: "?",
			check: flagsChanged(outDir, flagBits),
		},
		{
			name: "FS_IOC32_SETFLAGS (the 32-bit number) from a 64-bit process",
			why: "the compat number is listed too: this kernel fails it natively (ENOTTY), so nothing changed, and the attempt is still MUTATES of the file: killed; " +
				"bpf-lsm's file_ioctl refuses it before the file system sees it",
			steps: steps(op("setflags32", ro)),
			want:  detected, errno: "ENOTTY", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: flagsUntouched(ro),
		},
		{
			name:  "FS_IOC_FSSETXATTR on a read-only fd of a CONSUMES-only file",
			why:   "the fsxattr's nodump xflag is the inode's nodump flag, set by another command: MUTATES of the file, detected and killed (bpf-lsm refuses it)",
			steps: steps(op("fsxattr", ro)),
			want:  detected, triple: file("MUTATES", ro), declared: "CONSUMES",
			check: flagsChanged(ro, harness.FsNodumpFl),
		},
		{
			name:    "FS_IOC_SETFLAGS when the manifest declares no MUTATES",
			why:     "nothing may change any file: the seccomp filter refuses metadata ioctls (EPERM) before the effect, and the tracepoints report the refusal; on bpf-lsm, file_ioctl refuses it",
			intents: consumesOnly,
			steps:   steps(op("setflags", ro)),
			want:    blocked, errno: "EPERM", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: flagsUntouched(ro),
		},
		{
			name:    "FS_IOC_FSSETXATTR when the manifest declares no MUTATES",
			why:     "as above, for the fsxattr",
			intents: consumesOnly,
			steps:   steps(op("fsxattr", ro)),
			want:    blocked, errno: "EPERM", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: flagsUntouched(ro),
		},
		{
			name:    "FS_IOC32_SETFLAGS when the manifest declares no MUTATES",
			why:     "the 32-bit number is refused by the same filter, before the file system could accept it",
			intents: consumesOnly,
			steps:   steps(op("setflags32", ro)),
			want:    blocked, errno: "EPERM", triple: file("MUTATES", ro), declared: "CONSUMES",
			check: flagsUntouched(ro),
		},
		{
			name:  "FS_IOC_SETFLAGS on a file the manifest lets the agent change",
			why:   "a control: MUTATES declared on rw/**, so the ioctl is in scope on every backend and lands",
			steps: steps(op("setflags", mine)),
			want:  allowed,
			check: flagsSet(mine, flagBits),
		},
	}
}

func execMapRows(t *testing.T) []row {
	code := func(e *env) string { return e.W("rw", "code") }
	// A copy of a real binary the agent wrote in its writable scope.
	agentCode := func(t *testing.T, e *env) {
		b, err := os.ReadFile("/usr/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		e.File(code(e), string(b))
	}
	id := harness.Real(t, "/usr/bin/id")
	loader := harness.Real(t, "/lib64/ld-linux-x86-64.so.2")
	const notSeen = "Landlock does not mediate executable mappings and the tracepoints do not report them: a declared program can map an undeclared file's code and run it without an exec (bpf-lsm's mmap_file/file_mprotect refuse it)"
	onLSM := func(p func(e *env) string) *row {
		return &row{want: blocked, errno: "EPERM", triple: func(e *env) string { return "PROVIDES PROC:" + p(e) }}
	}
	return []row{
		{
			name:  "map an agent-written file executable (mmap PROT_EXEC)",
			why:   "what ld.so and dlopen do with a library: the file's code runs without an exec; no PROC intent covers it and it is outside the baseline's library directories",
			setup: agentCode,
			steps: steps(op("mmap-exec", code)),
			want:  blocked, errno: "EPERM", triple: func(e *env) string { return "PROVIDES PROC:" + code(e) },
			escape: notSeen,
			lsm:    onLSM(code),
		},
		{
			name:  "map a file readable, then mprotect it executable",
			why:   "the same code, made executable after the mapping (file_mprotect)",
			setup: agentCode,
			steps: steps(op("mprotect-exec", code)),
			want:  blocked, errno: "EPERM", triple: func(e *env) string { return "PROVIDES PROC:" + code(e) },
			escape: notSeen,
			lsm:    onLSM(code),
		},
		{
			name:  "map an undeclared system binary executable",
			why:   "/usr/bin is no library directory: mapping /usr/bin/id's code needs the PROC intent its exec would",
			steps: steps(op("mmap-exec", lit(id))),
			want:  blocked, errno: "EPERM", triple: lit("PROVIDES PROC:" + id),
			escape: notSeen,
			lsm:    onLSM(lit(id)),
		},
		{
			name:  "map a file of the baseline's library directories executable",
			why:   "a control: every dynamic program maps its libraries (here the dynamic loader's own file) from the baseline's library directories; allowed on every backend",
			steps: steps(op("mmap-exec", lit(loader))),
			want:  allowed,
			check: func(t *testing.T, _ *env, _ *harness.Outcome) {
				if !strings.HasPrefix(loader, "/usr/lib") && !strings.HasPrefix(loader, "/lib") {
					t.Logf("the loader is at %s, outside /usr/lib and /lib", loader)
				}
			},
		},
	}
}
