package etcdstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// The linearizability check: holders on two stores acquire and release at
// random; porcupine checks the history against a model of the lease table
// (a grant only when no other holder's lease conflicts, a refusal only when
// one does). An operation that failed (etcd unreachable) has an unknown
// outcome: the model keeps every world it may have led to.

var linIntents = []string{"MUTATES FILE:/r/**", "MUTATES FILE:/r/a", "CONSUMES FILE:/r/a", "MUTATES FILE:/s/b"}

const linHolders = 4

type linIn struct {
	release bool
	holder  int
	res     int
}

type linOut struct{ granted, unknown bool }

// world is one possible table: the intent each holder holds (+1; 0 none).
type world [linHolders]byte

func linModel(conf [][]bool) porcupine.Model {
	step := func(w world, in linIn, out linOut) []world {
		if in.release {
			n := w
			n[in.holder] = 0
			if out.unknown {
				return []world{w, n}
			}
			return []world{n}
		}
		blocked := false
		for j, r := range w {
			if j != in.holder && r != 0 && conf[r-1][in.res] {
				blocked = true
			}
		}
		g := w
		g[in.holder] = byte(in.res + 1)
		switch {
		case out.unknown && !blocked && w[in.holder] == 0:
			return []world{w, g}
		case out.unknown:
			return []world{w}
		case out.granted && !blocked && w[in.holder] == 0:
			return []world{g}
		case !out.granted && blocked:
			return []world{w}
		}
		return nil
	}
	return porcupine.Model{
		Init: func() any { return encode([]world{{}}) },
		Step: func(s, i, o any) (bool, any) {
			var next []world
			for _, w := range decode(s.(string)) {
				next = append(next, step(w, i.(linIn), o.(linOut))...)
			}
			return len(next) > 0, encode(next)
		},
		DescribeOperation: func(i, o any) string { return fmt.Sprintf("%+v -> %+v", i, o) },
	}
}

func encode(ws []world) string {
	var ss []string
	for _, w := range ws {
		ss = append(ss, string(w[:]))
	}
	slices.Sort(ss)
	return strings.Join(slices.Compact(ss), "|")
}

func decode(s string) (ws []world) {
	for _, p := range strings.Split(s, "|") {
		var w world
		copy(w[:], p)
		ws = append(ws, w)
	}
	return ws
}

// TestModelRefusesDoubleGrant: the model is not vacuous: two overlapping
// grants with no release between them are not linearizable.
func TestModelRefusesDoubleGrant(t *testing.T) {
	conf := [][]bool{{true}}
	hist := []porcupine.Operation{
		{ClientId: 0, Input: linIn{holder: 0}, Call: 0, Output: linOut{granted: true}, Return: 1},
		{ClientId: 1, Input: linIn{holder: 1}, Call: 2, Output: linOut{granted: true}, Return: 3},
	}
	if porcupine.CheckOperations(linModel(conf), hist) {
		t.Fatal("two conflicting grants accepted")
	}
	hist[1].Output = linOut{}
	if !porcupine.CheckOperations(linModel(conf), hist) {
		t.Fatal("a refusal while held rejected")
	}
}

type fault int

const (
	noFault fault = iota
	killLeader
	pauseLeader
)

func TestLinearizable(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, f := range []struct {
		name string
		f    fault
	}{{"steady", noFault}, {"leader-killed", killLeader}, {"leader-paused-past-ttl", pauseLeader}} {
		t.Run(f.name, func(t *testing.T) { linRun(t, f.f) })
	}
}

func linRun(t *testing.T, f fault) {
	c := etcdtest.Start(t, 3)
	stores := []*Store{New(c.Client(t), "/lin", "hostA"), New(c.Client(t), "/lin", "hostB")}
	defer stores[0].Close()
	defer stores[1].Close()
	claims := make([]lease.Claim, len(linIntents))
	conf := make([][]bool, len(linIntents))
	for i, s := range linIntents {
		claims[i] = claim(t, s)
	}
	for i := range claims {
		conf[i] = make([]bool, len(claims))
		for j := range claims {
			conf[i][j] = lease.Overlap(claims[i].Resource, claims[j].Resource) &&
				policy.Conflicts(claims[i].Predicate, claims[j].Predicate)
		}
	}
	start := time.Now()
	var mu sync.Mutex
	var hist []porcupine.Operation
	record := func(h int, in linIn, call time.Time, out linOut) {
		mu.Lock()
		hist = append(hist, porcupine.Operation{ClientId: h, Input: in, Call: call.Sub(start).Nanoseconds(),
			Output: out, Return: time.Since(start).Nanoseconds()})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for h := 0; h < linHolders; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			linWorker(stores[h%2], h, claims, record)
		}()
	}
	injectFault(t, c, f)
	wg.Wait()
	granted, refused := 0, 0
	for _, op := range hist {
		if o := op.Output.(linOut); !op.Input.(linIn).release && !o.unknown {
			if o.granted {
				granted++
			} else {
				refused++
			}
		}
	}
	if granted == 0 || refused == 0 {
		t.Fatalf("a weak history: %d grants, %d refusals", granted, refused)
	}
	if res := porcupine.CheckOperationsTimeout(linModel(conf), hist, 60*time.Second); res != porcupine.Ok {
		t.Fatalf("history of %d operations is %v (not linearizable against the lease table)", len(hist), res)
	}
	t.Logf("%d operations (%d grants, %d refusals) linearizable", len(hist), granted, refused)
}

// linWorker acquires and releases at random, 30 times, releasing until it
// knows it holds nothing before its next acquire.
func linWorker(s *Store, h int, claims []lease.Claim, record func(int, linIn, time.Time, linOut)) {
	r := rand.New(rand.NewPCG(uint64(h), 7))
	holder := lease.Holder{Agent: "w", Session: fmt.Sprint("h", h)}
	for n := 0; n < 30; n++ {
		in := linIn{holder: h, res: r.IntN(len(claims))}
		call := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := s.Acquire(ctx, lease.Request{Holder: holder, TTL: 2 * time.Second, Claims: []lease.Claim{claims[in.res]}})
		cancel()
		record(h, in, call, linOut{granted: err == nil && d.Outcome == lease.Granted, unknown: err != nil})
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
		for {
			call := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := s.Release(ctx, holder)
			cancel()
			record(h, linIn{release: true, holder: h}, call, linOut{unknown: err != nil})
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func injectFault(t *testing.T, c *etcdtest.Cluster, f fault) {
	if f == noFault {
		return
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := c.Leader(ctx, c.Client(t))
	if l == nil {
		t.Fatal("no leader")
	}
	if f == killLeader {
		l.Kill()
		return
	}
	l.Pause()
	time.Sleep(3 * time.Second) // past the 2 s TTL
	l.Resume()
}
