//go:build linux

package perf

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// bpfTime runs f with the kernel's BPF run-time statistics on and returns
// the time klock's programs (obs_*, klock_*, ng_*) spent running while f
// ran, and how many times they ran. Statistics cost every program run two
// clock reads, so f is an extra run, not one whose wall time is compared.
// The session's programs are unloaded when it ends: a poller reads them
// while it runs and keeps each program's last figures.
func bpfTime(b *testing.B, f func()) (time.Duration, uint64) {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("no BPF run-time statistics: %v", err)
		return 0, 0
	}
	defer stats.Close()
	type fig struct {
		rt   time.Duration
		cnt  uint64
		name string
	}
	var (
		mu   sync.Mutex
		last = map[ebpf.ProgramID]fig{}
	)
	poll := func() {
		for id := ebpf.ProgramID(0); ; {
			next, err := ebpf.ProgramGetNextID(id)
			if err != nil { // ENOENT: the last one
				return
			}
			id = next
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				continue
			}
			info, ierr := p.Info()
			st, serr := p.Stats()
			p.Close()
			if ierr != nil || serr != nil || !ours(info.Name) {
				continue
			}
			mu.Lock()
			last[id] = fig{st.Runtime, st.RunCount, info.Name}
			mu.Unlock()
		}
	}
	poll()
	before := map[ebpf.ProgramID]fig{}
	for id, v := range last {
		before[id] = v
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				poll()
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	var rt time.Duration
	var cnt uint64
	byName := map[string]fig{}
	for id, v := range last {
		rt += v.rt - before[id].rt
		cnt += v.cnt - before[id].cnt
		f := byName[v.name]
		f.rt += v.rt - before[id].rt
		f.cnt += v.cnt - before[id].cnt
		byName[v.name] = f
	}
	// Which programs the time went to, costliest first.
	names := slices.SortedFunc(maps.Keys(byName), func(a, b string) int { return cmp.Compare(byName[b].rt, byName[a].rt) })
	var parts []string
	for _, n := range names {
		if f := byName[n]; f.cnt > 0 {
			parts = append(parts, fmt.Sprintf("%s %d runs %.1f ms", n, f.cnt, float64(f.rt.Microseconds())/1000))
		}
	}
	b.Logf("BPF programs' own time: %s", strings.Join(parts, "; "))
	return rt, cnt
}

func ours(name string) bool {
	for _, p := range []string{"obs_", "klock_", "ng_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
