//go:build linux

package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkMetaWalk is the pre-flight cost of Options.MetaScopes: a region
// of 10,000 files in 100 directories, half of them the agent's (recorded:
// stat, xattrs, inode flags), half another user's (a stat and an ACL
// probe). It reports what MetaScopes adds to Take per path looked at, and
// logs, once, the walk of this host's real MetaScopes (its /tmp,
// /var/tmp, /dev/shm, /run/lock) for uid 65534 (nobody, the test agent).
func BenchmarkMetaWalk(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (chown to the agent's uid)")
	}
	const agentUID = 4012348
	uid := uint32(agentUID)
	dir := diskTempDir(b)
	defer os.RemoveAll(dir)
	region := filepath.Join(dir, "region")
	for i := 0; i < 10_000; i++ {
		sub := filepath.Join(region, fmt.Sprintf("d%02d", i/100))
		if i%100 == 0 {
			must(b, os.MkdirAll(sub, 0o755))
			must(b, os.Chown(sub, agentUID, agentUID))
		}
		p := filepath.Join(sub, "f"+strconv.Itoa(i))
		must(b, os.WriteFile(p, []byte("x"), 0o644))
		if i%2 == 0 {
			must(b, os.Chown(p, agentUID, agentUID))
		}
	}
	work := filepath.Join(dir, "work")
	must(b, os.Mkdir(work, 0o755))
	// What MetaScopes adds to Take: the walk and the flags of what it
	// recorded (Take's fsyncs, which a loaded host makes noisy, are
	// shared with the rest of the backup).
	walk := func(meta []Scope, uid uint32) (Stats, time.Duration) {
		t := &taker{ctx: context.Background(), scopes: []Scope{{Path: work, Tree: true}}, meta: normalize(meta),
			metaLimit: DefaultMetaLimit, agent: &agent{uid: uid, gids: []uint32{uid}},
			reach: map[string]reach{}, workers: max(4, runtime.NumCPU())}
		t0 := time.Now()
		entries, _, err := t.walkMeta()
		must(b, err)
		must(b, t.fillAttrs(entries))
		t.stats.MetaEntries = len(entries)
		return t.stats, time.Since(t0)
	}
	var st Stats
	var d time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, d = walk([]Scope{{Path: region, Tree: true}}, uid)
	}
	b.StopTimer()
	b.ReportMetric(float64(d.Nanoseconds())/float64(st.MetaVisited), "ns/path")
	b.ReportMetric(float64(st.MetaVisited), "paths")
	b.ReportMetric(float64(st.MetaEntries), "entries")

	host := MetaScopes(nil, 65534)
	hs, hd := walk(host, 65534)
	b.Logf("this host's MetaScopes %v for uid 65534: %d paths looked at, %d recorded, %v", host, hs.MetaVisited, hs.MetaEntries, hd)
}

// BenchmarkMetaWalkUsrBin is the meta walk every session's backup does of
// this host's /usr/bin (each manifest's PROVIDES PROC:/usr/bin/** declares
// it): an lstat of every entry, split across threads, and ACL answers
// remembered per inode state after the first walk.
func BenchmarkMetaWalkUsrBin(b *testing.B) {
	t := &taker{ctx: context.Background(), scopes: []Scope{{Path: b.TempDir(), Tree: true}},
		meta: normalize([]Scope{{Path: "/usr/bin", Tree: true}}), metaLimit: DefaultMetaLimit,
		agent: &agent{uid: 65534, gids: []uint32{65534}}, reach: map[string]reach{}, workers: 4}
	for b.Loop() {
		if _, _, err := t.walkMeta(); err != nil {
			b.Fatal(err)
		}
	}
}
