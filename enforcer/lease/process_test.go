package lease

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

// The test binary doubles as the other processes of a host store: with
// childEnv set it runs the child its arguments name instead of the tests.
const childEnv = "KLOCK_LEASE_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "hammer":
		os.Exit(hammerChild(os.Args[1:]))
	case "hold":
		os.Exit(holdChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// scopes are the claims sessions pick from: overlapping subtrees, files in
// them, writes and reads.
var scopes = []string{
	"MUTATES FILE:/repo/**", "MUTATES FILE:/repo/a/**", "MUTATES FILE:/repo/b/**", "MUTATES FILE:/repo/a/x",
	"MUTATES FILE:/repo/b/*", "CONSUMES FILE:/repo/**", "CONSUMES FILE:/repo/a/**", "CONSUMES FILE:/repo/b/y",
	"DELETES FILE:/repo/c/**", "CONSUMES FILE:/repo/c/z", "PROVIDES NET:127.0.0.1:8080/tcp", "CONSUMES NET:127.0.0.1:8080/tcp",
}

func randomClaims(r *rand.Rand) []Claim {
	var cs []Claim
	for range 1 + r.IntN(3) {
		cs = append(cs, mustClaim(scopes[r.IntN(len(scopes))]))
	}
	return cs
}

// session is one randomized session: acquire its scopes with Wait-Die
// (keeping its age), hold them briefly, release them. It returns how many
// decisions it took to be granted.
func session(ctx context.Context, s Store, r *rand.Rand, who string, maxHold time.Duration) (int, error) {
	req := Request{Holder: Holder{Agent: "agent-" + who, Session: who}, Claims: randomClaims(r)}
	tries := 1
	d, err := AcquireWait(ctx, s, req, WaitOptions{For: 2 * time.Minute, Base: 2 * time.Millisecond, Cap: 50 * time.Millisecond,
		OnRetry: func(Decision, time.Duration) { tries++ }})
	if err != nil {
		return tries, err
	}
	if d.Outcome != Granted {
		return tries, fmt.Errorf("%s: not granted in 2 minutes: %v", who, d.Outcome)
	}
	time.Sleep(time.Duration(r.Int64N(int64(maxHold) + 1)))
	if n, err := s.Release(ctx, req.Holder); err != nil || n != len(req.Claims) {
		return tries, fmt.Errorf("%s: released %d of %d: %v", who, n, len(req.Claims), err)
	}
	return tries, nil
}

// hammerChild: dir id cycles compactSize. Runs cycles sessions one after
// the other on the host store in dir.
func hammerChild(args []string) int {
	dir := args[0]
	id, _ := strconv.Atoi(args[1])
	cycles, _ := strconv.Atoi(args[2])
	compact, _ := strconv.ParseInt(args[3], 10, 64)
	h, err := OpenHost(dir, WithCompactSize(compact))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer h.Close()
	r := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	worst := 0
	for c := range cycles {
		tries, err := session(context.Background(), h, r, fmt.Sprintf("p%d-%d", id, c), 3*time.Millisecond)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		worst = max(worst, tries)
	}
	fmt.Printf("worst %d\n", worst)
	return 0
}

// holdChild: dir. Acquires MUTATES FILE:/repo/** with a short TTL, says
// so, and sleeps (until killed).
func holdChild(args []string) int {
	h, err := OpenHost(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	req := Request{Holder: Holder{Agent: "agent-k", Session: "killed"}, Claims: []Claim{mustClaim("MUTATES FILE:/repo/**")},
		TTL: 300 * time.Millisecond, Grace: 200 * time.Millisecond}
	d, err := h.Acquire(context.Background(), req)
	if err != nil || d.Outcome != Granted {
		fmt.Fprintln(os.Stderr, d.Outcome, err)
		return 1
	}
	fmt.Printf("held %d\n", d.Lease(0).ExpiresAt.Add(d.Lease(0).Grace).UnixNano())
	time.Sleep(time.Hour)
	return 0
}

func child(t *testing.T, kind string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"="+kind)
	cmd.Stderr = os.Stderr
	return cmd
}

// history is a store's grants and frees in order; overlapping reports the
// first instant two conflicting leases of different holders are held
// together.
type history struct {
	held  map[string]Lease
	seen  int
	first string
}

func newHistory() *history { return &history{held: map[string]Lease{}} }

func (h *history) grant(l Lease) {
	h.seen++
	for _, o := range h.held {
		if o.Holder != l.Holder && policy.Conflicts(o.Predicate, l.Predicate) && Overlap(o.Resource, l.Resource) && h.first == "" {
			h.first = fmt.Sprintf("%s %s (%s) granted while %s %s (%s) is held", l.Predicate, l.Object, l.Holder.Session,
				o.Predicate, o.Object, o.Holder.Session)
		}
	}
	h.held[l.ID] = l
}

func (h *history) free(id string) { delete(h.held, id) }

func (h *history) event(e Event) {
	switch e.Type {
	case LeaseGranted:
		h.grant(e.Lease)
	case LeaseFreed:
		h.free(e.Lease.ID)
	}
}

// journalHistory replays a journal that was never compacted.
func journalHistory(t *testing.T, dir string) *history {
	f, err := os.Open(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := newHistory()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		switch r.Op {
		case opSnapshot:
			if r.Gen != 1 {
				t.Fatalf("the journal was compacted (generation %d): its history is not whole", r.Gen)
			}
		case opGrant:
			for _, w := range r.Grants {
				for _, l := range w.leases() {
					h.grant(l)
				}
			}
		case opEnd:
			for _, id := range r.IDs {
				h.free(id)
			}
		}
	}
	return h
}

// TestHostProcessesNeverOverlap: processes hammer one host store with
// conflicting claims (Wait-Die with backoff, waits across processes); the
// journal, replayed, never has two conflicting leases held at once, and
// every session was granted.
func TestHostProcessesNeverOverlap(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	const procs, cycles = 6, 25
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := child(t, "hammer", dir, strconv.Itoa(i), strconv.Itoa(cycles), strconv.Itoa(1<<30)).Output()
			if err != nil {
				errs <- fmt.Errorf("child %d: %v", i, err)
			}
			t.Logf("child %d: %s", i, strings.TrimSpace(string(out)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h := journalHistory(t, dir)
	if h.first != "" {
		t.Fatal(h.first)
	}
	if h.seen < procs*cycles || len(h.held) != 0 {
		t.Fatalf("%d leases granted (want >= %d), %d still held", h.seen, procs*cycles, len(h.held))
	}
}

// TestHostProcessesCompaction: the same with a journal compacted over and
// over while the processes read it; a store watching from here replays
// the events of all of them without an overlap.
func TestHostProcessesCompaction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	w := openHost(t, dir)
	ev, stop := w.Subscribe(1 << 20)
	defer stop()
	const procs, cycles = 4, 30
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := child(t, "hammer", dir, strconv.Itoa(i), strconv.Itoa(cycles), "8192").Output(); err != nil {
				errs <- fmt.Errorf("child %d: %v %s", i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ls, err := w.List(context.Background(), Filter{})
	if err != nil || len(ls) != 0 {
		t.Fatalf("after every session ended: %v %v", ls, err)
	}
	if w.gen < 3 {
		t.Fatalf("generation %d: the journal was not compacted under load", w.gen)
	}
	h := newHistory()
	for len(ev) > 0 {
		h.event(<-ev)
	}
	if h.first != "" {
		t.Fatal(h.first)
	}
	if h.seen < procs*cycles || len(h.held) != 0 {
		t.Fatalf("events: %d grants (want >= %d), %d left held", h.seen, procs*cycles, len(h.held))
	}
}

// TestHostKilledHolder: a process killed with SIGKILL while it holds a
// lease keeps it until ExpiresAt + Grace; a waiter in another process is
// granted then, not before, and nothing is granted twice meanwhile.
func TestHostKilledHolder(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "leases")
	cmd := child(t, "hold", dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var until int64
	if _, err := fmt.Fscanf(bufio.NewReader(out), "held %d\n", &until); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	h := openHost(t, dir)
	younger := req(t, "young", time.Now(), "MUTATES FILE:/repo/x")
	if d, _ := h.Acquire(ctx, younger); d.Outcome != Die && time.Now().UnixNano() < until {
		t.Fatalf("granted %v while the killed process's lease is held", d.Outcome)
	}
	older := req(t, "old", time.Unix(0, 1), "MUTATES FILE:/repo/x")
	d, err := h.Await(ctx, older, time.Minute)
	granted := time.Now().UnixNano()
	if err != nil || d.Outcome != Granted {
		t.Fatalf("%v %v", d.Outcome, err)
	}
	if granted < until {
		t.Fatalf("granted %v before the dead holder's lease ran out", time.Duration(until-granted))
	}
	hist := journalHistory(t, dir)
	if hist.first != "" {
		t.Fatal(hist.first)
	}
	// Held now, and ended: the killed session's lease expired, and one
	// grant to the waiter.
	ls, _ := h.List(ctx, Filter{EndedSince: time.Unix(0, 1)})
	if len(ls) != 2 || ls[0].Holder.Session != "killed" || ls[0].State != Expired || ls[1].Holder.Session != "old" {
		t.Fatalf("history %+v", ls)
	}
}

// leases renders a journaled grant's leases.
func (w *wireGrant) leases() []Lease {
	base, _, _ := parseID(w.First)
	ids := leaseIDs(base, len(w.Claims))
	var out []Lease
	for i, c := range w.Claims {
		out = append(out, Lease{ID: ids[i*idLen : (i+1)*idLen], Holder: w.Holder, Predicate: c.Predicate, Resource: c.Resource,
			Object: c.Resource.String(), Intent: c.Intent, Age: w.Age, AcquiredAt: w.Acquired, ExpiresAt: w.ExpiresAt, TTL: w.TTL,
			Grace: w.Grace})
	}
	return out
}
