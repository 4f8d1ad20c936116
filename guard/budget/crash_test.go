package budget

import (
	"bufio"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/receipt"
)

const crashChildEnv = "KLOCK_BUDGET_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns: killed by the parent
	}
	os.Exit(m.Run())
}

var crashGrants = []Grant{
	{Key: Key{"crash", 0}, Tool: "t0", Limits: Limits{Currency: "USD", PerInvocation: u(100), Total: u(1 << 40), MaxInvocations: 1 << 40}},
	{Key: Key{"crash", 1}, Tool: "t1", Limits: Limits{Currency: "USD", PerInvocation: u(50), Total: u(30_000)}},
}

// crashChild runs load against a durable, group-committed ledger until it
// is killed, printing "ready" once decisions are flowing.
func crashChild(dir string) {
	keyPEM, err := os.ReadFile(filepath.Join(dir, "key"))
	if err != nil {
		panic(err)
	}
	priv := ed25519.PrivateKey(keyPEM)
	s, err := Open(filepath.Join(dir, "ledger.db"), filepath.Join(dir, "receipts.jsonl"), priv, WithGroupCommit(64))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	for _, g := range crashGrants {
		if err := s.Define(ctx, g); err != nil {
			fmt.Println("define:", err)
			os.Exit(3)
		}
	}
	ready := make(chan struct{}, 64)
	for w := 0; w < 16; w++ {
		go func(w int) {
			for i := 0; ; i++ {
				g := crashGrants[(w+i)%2]
				h, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(uint64(1 + (w*7+i)%50))})
				if err != nil {
					if !errors.Is(err, ErrDenied) {
						fmt.Println("reserve:", err)
						os.Exit(3)
					}
					continue
				}
				switch i % 3 {
				case 0:
					s.Release(ctx, h.ID, "later guard", "test")
				case 1:
					s.Reconcile(ctx, h.ID, Settle{Actual: usd(h.Reserved.Units / 2)})
				default:
					// left open: an in-flight call at the moment of the crash
				}
				if i == 50 {
					ready <- struct{}{}
				}
			}
		}(w)
	}
	<-ready
	fmt.Println("ready")
	select {}
}

// Kill -9 a process under load, restart, and check: the ledger equals the
// sum of the receipts, the chain verifies, and flipping a byte anywhere in
// any receipt is detected.
func TestCrashUnderLoadLosesNothing(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "key"), f.priv, 0o600); err != nil {
		t.Fatal(err)
	}
	f.db, f.chain = filepath.Join(f.dir, "ledger.db"), filepath.Join(f.dir, "receipts.jsonl")
	replays := 0
	for round := 0; round < 3; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+f.dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child said %q", round, line)
		}
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v, not SIGKILL", round, cmd.ProcessState)
		}
		replays += f.checkLedgerMatchesReceipts(t, round)
	}
	// The child was killed with answered decisions in the decision journal
	// only (SQLite gets them up to applyEvery later): the check above
	// covered replaying them.
	if replays == 0 {
		t.Fatal("no round left decisions for Open to replay from the journal")
	}
	f.checkEveryFlipDetected(t)
}

// checkLedgerMatchesReceipts returns how many journal records Open
// replayed.
func (f *fixture) checkLedgerMatchesReceipts(t *testing.T, round int) int {
	t.Helper()
	s, err := Open(f.db, f.chain, f.priv) // recovery re-emits what the chain lacks
	if err != nil {
		t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
	}
	var uses []Usage
	for _, g := range crashGrants {
		use, err := s.Usage(ctx, g.Key)
		if err != nil {
			t.Fatal(err)
		}
		uses = append(uses, use)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	charged, inv, n := f.ledgerFromReceipts(t)
	for _, use := range uses {
		if uint64(charged[use.Key]) != use.Charged.Units || uint64(inv[use.Key]) != use.Invocations {
			t.Fatalf("round %d: %s ledger %v in %d invocations, receipts say %d in %d", round, use.Key, use.Charged, use.Invocations, charged[use.Key], inv[use.Key])
		}
		if use.Limits.Total != nil && use.Charged.Units > *use.Limits.Total {
			t.Fatalf("round %d: %s overspent: %v", round, use.Key, use.Charged)
		}
	}
	t.Logf("round %d: %d receipts (%d journal records replayed); ledger %v/%d and %v/%d match them", round, n, s.replays, uses[0].Charged, uses[0].Invocations, uses[1].Charged, uses[1].Invocations)
	if n < 100 {
		t.Fatalf("round %d: only %d receipts: the child was not under load", round, n)
	}
	return s.replays
}

// checkEveryFlipDetected flips one byte in a spread of receipts (first,
// last and evenly between; every byte is covered by the receipt package's
// own test on a short chain) and checks verification fails each time.
func (f *fixture) checkEveryFlipDetected(t *testing.T) {
	data, err := os.ReadFile(f.chain)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	for i := 0; i < len(data); {
		starts = append(starts, i)
		j := strings.IndexByte(string(data[i:]), '\n')
		i += j + 1
	}
	picks := []int{0, len(starts) - 1}
	for k := 1; k < 12; k++ {
		picks = append(picks, k*len(starts)/12)
	}
	for _, p := range picks {
		end := len(data)
		if p+1 < len(starts) {
			end = starts[p+1]
		}
		pos := starts[p] + rand.IntN(end-1-starts[p])
		bad := append([]byte(nil), data...)
		bad[pos] ^= byte(1 << rand.IntN(8))
		if bad[pos] == '\n' {
			bad[pos] ^= 0x80
		}
		path := filepath.Join(t.TempDir(), "flipped.jsonl")
		os.WriteFile(path, bad, 0o600)
		if _, err := receipt.VerifyFile(path, f.pub, nil); err == nil {
			t.Fatalf("flipping byte %d of receipt %d was not detected", pos-starts[p], p+1)
		}
	}
}
