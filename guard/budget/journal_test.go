package budget

import (
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// holdLedger blocks the applier (and every other SQLite use) by taking
// the ledger's one connection, so that answered decisions stay in the
// journal only, as after a kill -9 between the two.
func holdLedger(t *testing.T, s *Store) func() {
	t.Helper()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return func() { conn.Close() }
}

// snapshot copies the ledger's files as a kill -9 would leave them (the
// page cache is what the next process reads).
func (f *fixture) snapshot(t *testing.T, withChain bool) *fixture {
	t.Helper()
	g := *f
	g.dir = t.TempDir()
	g.db, g.chain = filepath.Join(g.dir, "ledger.db"), filepath.Join(g.dir, "receipts.jsonl")
	files := []string{"", "-wal", ".decisions"}
	for _, suf := range files {
		b, err := os.ReadFile(f.db + suf)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(g.db+suf, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if withChain {
		b, err := os.ReadFile(f.chain)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(g.chain, b, 0o600)
	}
	return &g
}

func reserveN(t *testing.T, s *Store, k Key, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/4; i++ {
				if _, err := s.Reserve(ctx, Request{Key: k, Cost: usd(2)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// journalPosition reads SQLite's journal position in a ledger not open.
func journalPosition(t *testing.T, db string) (epoch, seq uint64, off int64) {
	t.Helper()
	d, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.QueryRow(`SELECT epoch, seq, off FROM journal`).Scan(&epoch, &seq, &off); err != nil {
		t.Fatal(err)
	}
	return
}

// Decisions answered while SQLite lagged are in the ledger after a crash:
// Open replays them from the journal, and the ledger equals the receipts.
func TestJournalReplayAfterCrash(t *testing.T) {
	f := newFixture(t)
	s := f.open(t, WithGroupCommit(16))
	g := Grant{Key: Key{"j", 0}, Tool: "t", Limits: Limits{Currency: "USD", Total: u(1 << 30)}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Usage(ctx, g.Key); err != nil { // the grant is in SQLite
		t.Fatal(err)
	}
	release := holdLedger(t, s)
	reserveN(t, s, g.Key, 200)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	crashed := f.snapshot(t, true)
	release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := Open(crashed.db, crashed.chain, crashed.priv)
	if err != nil {
		t.Fatal(err)
	}
	if r.replays == 0 {
		t.Fatal("nothing was replayed: the test did not leave decisions in the journal only")
	}
	use, err := r.Usage(ctx, g.Key)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if use.Invocations != 200 || use.Charged.Units != 400 || use.OpenHolds != 200 {
		t.Fatalf("after replaying %d records: %+v, want the 200 answered reserves", r.replays, use)
	}
	charged, inv, n := crashed.ledgerFromReceipts(t)
	if charged[g.Key] != 400 || inv[g.Key] != 200 || n != 200 {
		t.Fatalf("receipts: %d charged in %d invocations, %d receipts", charged[g.Key], inv[g.Key], n)
	}
}

// A torn record and everything after it are dropped (never answered, in a
// real crash), the ledger still equals the receipts (re-emitted from it),
// and a later crash does not bring the dropped records back: the new
// epoch's records are the only ones replayed.
func TestJournalTornTail(t *testing.T) {
	f := newFixture(t)
	s := f.open(t, WithGroupCommit(16))
	g := Grant{Key: Key{"torn", 0}, Tool: "t", Limits: Limits{Currency: "USD"}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Usage(ctx, g.Key); err != nil {
		t.Fatal(err)
	}
	release := holdLedger(t, s)
	for i := 0; i < 10; i++ { // one record each
		if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := f.snapshot(t, false)
	release()
	s.Close()

	// Tear record 7 of the 10: 1-6 survive, 8-10 are intact but dropped.
	epoch, seq, off := journalPosition(t, crashed.db)
	data, err := os.ReadFile(crashed.db + ".decisions")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := scanJournal(data, epoch, seq, off)
	if err != nil || len(recs) != 10 {
		t.Fatalf("journal holds %d records (%v), want 10", len(recs), err)
	}
	data[recs[6].end-3] ^= 0xff
	os.WriteFile(crashed.db+".decisions", data, 0o600)

	r, err := Open(crashed.db, crashed.chain, crashed.priv, WithGroupCommit(16))
	if err != nil {
		t.Fatal(err)
	}
	if r.replays != 6 {
		t.Fatalf("replayed %d records, want 6", r.replays)
	}
	use, err := r.Usage(ctx, g.Key)
	if err != nil || use.Invocations != 6 {
		t.Fatalf("usage %+v (%v), want 6 invocations", use, err)
	}
	// Crash again, with new decisions in the journal only (the first
	// brings the grant into memory: deciding never waits for SQLite then).
	if _, err := r.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
		t.Fatal(err)
	}
	release = holdLedger(t, r)
	for i := 0; i < 3; i++ {
		if _, err := r.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
			t.Fatal(err)
		}
	}
	again := crashed.snapshot(t, false)
	release()
	r.Close()
	a, err := Open(again.db, again.chain, again.priv)
	if err != nil {
		t.Fatal(err)
	}
	use, err = a.Usage(ctx, g.Key)
	a.Close()
	if err != nil || use.Invocations != 10 || use.Charged.Units != 10 {
		t.Fatalf("second crash: usage %+v (%v), want 10 invocations", use, err)
	}
	charged, inv, n := again.ledgerFromReceipts(t)
	if charged[g.Key] != 10 || inv[g.Key] != 10 || n != 10 {
		t.Fatalf("receipts: %d charged in %d invocations, %d receipts; want 10, 10, 10", charged[g.Key], inv[g.Key], n)
	}
}

// When the journal cannot be written, no caller is told its decision was
// made, and nothing more is decided: the file system under a live ledger
// is shut down (ext4's EXT4_IOC_SHUTDOWN on a loop-mounted image), so
// writes really fail.
func TestJournalFailureFailsClosed(t *testing.T) {
	testutil.RequirePrivileged(t)
	mnt := loopExt4(t)
	f := newFixture(t)
	f.db, f.chain = filepath.Join(mnt, "ledger.db"), filepath.Join(mnt, "receipts.jsonl")
	s := f.open(t, WithGroupCommit(16))
	defer s.Close()
	g := Grant{Key: Key{"fc", 0}, Tool: "t", Limits: Limits{Currency: "USD"}}
	if err := s.Define(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
		t.Fatal(err)
	}
	// Nothing is left to write but the next decision: the receipt chain is
	// flushed, and SQLite has every batch (Usage waits for the applier).
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Usage(ctx, g.Key); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	const ext4IOCShutdown, goingFlagsNoLogFlush = 0x8004587D, 2
	err = unix.IoctlSetPointerInt(int(d.Fd()), ext4IOCShutdown, goingFlagsNoLogFlush)
	d.Close()
	if err != nil {
		testutil.Unavailable(t, "ext4 shutdown ioctl: "+err.Error())
	}
	for i := 0; i < 3; i++ {
		h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)})
		if !errors.Is(err, ErrLedger) {
			t.Fatalf("call %d after the file system went: hold %+v, error %v; want ErrLedger", i, h, err)
		}
		if i == 0 && !strings.Contains(err.Error(), ".decisions") {
			t.Fatalf("the first refusal should name the journal: %v", err)
		}
	}
}

// loopExt4 mounts a fresh ext4 image and returns the mount point.
func loopExt4(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o700)
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			testutil.Unavailable(t, strings.Join(args, " ")+": "+err.Error()+": "+string(out))
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}
