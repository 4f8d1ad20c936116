package budget

import (
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"
)

// Every row count, including ones that need several statements (not a
// power of two, more than maxRows), inserts exactly the rows given, in
// order, with their values.
func TestMultiInsertWritesEveryRow(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	m, err := newMultiInsert(db, "t", "id, v", "")
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for _, n := range []int{0, 1, 2, 3, 7, 64, 65, 127, 130, 2*maxRows + 5} {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		var args []any
		for i := 0; i < n; i++ {
			args = append(args, next+i, "v"+strconv.Itoa(next+i))
		}
		if err := m.exec(tx, args); err != nil {
			t.Fatalf("%d rows: %v", n, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		next += n
		var count, sum int
		if err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(id), 0) FROM t WHERE v = 'v' || id`).Scan(&count, &sum); err != nil {
			t.Fatal(err)
		}
		if count != next || sum != next*(next-1)/2 {
			t.Fatalf("after %d rows: %d rows (id sum %d), want %d (%d)", n, count, sum, next, next*(next-1)/2)
		}
	}
	tx, _ := db.Begin()
	defer tx.Rollback()
	if err := m.exec(tx, []any{1}); err == nil {
		t.Fatal("a partial row was accepted")
	}
}
