//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// sqliteOp is a python3 program run on the database argv[1]: WAL mode, one
// row added, the row count printed.
const sqliteOp = `import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA journal_mode=WAL")
c.execute("insert into t values (1)")
c.commit()
print("rows", c.execute("select count(*) from t").fetchone()[0])
`

// rootSQLite runs python3 as root (the test) with prog on db, and gives
// what it left beside db to the agent.
func rootSQLite(t *testing.T, db, prog string) {
	t.Helper()
	if b, err := exec.Command("/usr/bin/python3", "-c", prog, db).CombinedOutput(); err != nil {
		t.Fatalf("python3: %v\n%s", err, b)
	}
	for _, suf := range []string{"", "-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(db + suf); err == nil {
			must(t, os.Chown(db+suf, harness.AgentUID, harness.AgentGID))
		}
	}
}

// TestLearnSQLiteWALThenStrict: a learning run whose agent writes a
// WAL-mode SQLite database in its home (outside the workdir) sees the
// -wal and -shm made and removed; the learned manifest declares their
// family, so a strict run that finds a WAL an earlier run left (a
// connection that died) is CLEAN and recovers the row in it. The
// run's scratch in its private /tmp is learned as ${tmpdir}/**, and the
// strict session starts with it. A write beside the database is still
// killed.
func TestLearnSQLiteWALThenStrict(t *testing.T) {
	w := outsideTmpWorld(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	if b, err := exec.Command("/usr/bin/python3", "-c", "import sqlite3").CombinedOutput(); err != nil {
		t.Skipf("python3 has no sqlite3: %v %s", err, b)
	}
	state := filepath.Join(filepath.Dir(w.Workdir), "home", ".state")
	w.Dir(filepath.Dir(state))
	w.Dir(state)
	db := filepath.Join(state, "state.sqlite")
	rootSQLite(t, db, `import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA journal_mode=WAL")
c.execute("create table t(x)")
c.commit()
c.close()
`)
	cmd := []string{"/bin/sh", "-c", `set -e
/usr/bin/python3 -c '` + sqliteOp + `' ` + db + `
s=$(mktemp /tmp/scratch.XXXXXX)
echo s > $s
cat $s
rm $s`}
	learn := w.Run(harness.Spec{Mode: policy.ModePermissive, Backend: session.BackendObserve,
		Manifest: []byte("tmp: private\n" + harness.ManifestYAML(w.Workdir, policy.ModePermissive, tools(t))),
		Command:  cmd})
	if learn.Res.Killed || learn.Res.Exit.ExitCode() != 0 || learn.Res.Learned == nil {
		t.Fatalf("learning run failed or learned nothing\n%s", learn.Dump())
	}
	learned := string(learn.Res.Learned)
	for _, want := range []string{"MUTATES FILE:" + db + "-wal", "DELETES FILE:" + db + "-shm", "FILE:${tmpdir}/**"} {
		if !strings.Contains(learned, want) {
			t.Errorf("learned manifest lacks %q:\n%s", want, learned)
		}
	}
	if strings.Contains(learned, "scratch.") || strings.Contains(learned, "FILE:/tmp") {
		t.Errorf("learned manifest names a host /tmp path or the run's scratch file:\n%s", learned)
	}

	// A connection that dies after its commit leaves its WAL (and the
	// index): the row is only there.
	rootSQLite(t, db, sqliteOp+"import os\nos._exit(0)\n")
	if _, err := os.Lstat(db + "-wal"); err != nil {
		t.Fatalf("no WAL left for the strict run: %v", err)
	}
	strict := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: learn.Res.Learned, Command: cmd})
	strict.AssertClean(t, 0)
	if !strings.Contains(strict.Stdout, "rows 3") {
		t.Errorf("strict run's output %q: want rows 3 (the left WAL's row recovered)", strict.Stdout)
	}

	beside := w.Run(harness.Spec{Mode: policy.ModeStrict, Manifest: learn.Res.Learned,
		Command: []string{"/bin/sh", "-c", "echo x > " + filepath.Join(state, "other") + "; sleep 1"}})
	if !beside.Res.Killed {
		t.Errorf("a write beside the database was not killed\n%s", beside.Dump())
	}
}
