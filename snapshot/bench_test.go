//go:build linux

package snapshot

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/policy"
)

const (
	benchFiles = 10_000
	benchBytes = 200 << 20
)

// diskTempDir is a directory on a real disk: TMPDIR unless it is tmpfs,
// else /var/tmp.
func diskTempDir(b *testing.B) string {
	for _, d := range []string{os.TempDir(), "/var/tmp"} {
		var fs unix.Statfs_t
		if unix.Statfs(d, &fs) == nil && fs.Type != unix.TMPFS_MAGIC {
			dir, err := os.MkdirTemp(d, "klock-snapshot-bench-")
			if err != nil {
				b.Fatal(err)
			}
			return dir
		}
	}
	b.Skip("no disk-backed temp directory")
	return ""
}

// genTree writes benchFiles files (100 per directory, 1..39 KiB, random
// bytes) totalling about benchBytes under dir/data.
func genTree(b *testing.B, dir string) (files []string, total int64) {
	rng := rand.New(rand.NewSource(42))
	buf := make([]byte, 64<<10)
	avg := benchBytes / benchFiles
	for i := 0; i < benchFiles; i++ {
		sub := filepath.Join(dir, "data", fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		n := 1024 + rng.Intn(2*avg-2048)
		rng.Read(buf[:n])
		p := filepath.Join(sub, "f"+strconv.Itoa(i))
		if err := os.WriteFile(p, buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, p)
		total += int64(n)
	}
	return files, total
}

func syncAllFS() { unix.Sync() }

// BenchmarkSnapshot measures, on one generated 10k-file, ~200 MB tree on a
// real disk, in one run: a cold Take against `cp -a` of the same tree (the
// throughput ratio is reported as x_cp_a; goal >= 0.8), a warm Take of the
// unchanged tree (goal <= 0.3 s), and a Restore of 100 changed files (goal
// <= 50 ms). Run it with
//
//	go test -run '^$' -bench BenchmarkSnapshot -benchtime 3x ./snapshot/
func BenchmarkSnapshot(b *testing.B) {
	dir := diskTempDir(b)
	b.Cleanup(func() { os.RemoveAll(dir) })
	files, total := genTree(b, filepath.Join(dir, "w"))
	W := filepath.Join(dir, "w")
	rs := &policy.Ruleset{Workdir: W, Files: []policy.PathRule{rule(W+"/data", policy.MatchSubtree, policy.Mutates, policy.Deletes)}}
	syncAllFS()
	time.Sleep(100 * time.Millisecond) // older than the index's racy window
	b.Logf("tree: %d files, %.1f MB in %s", len(files), float64(total)/1e6, W)

	b.Run("cold_vs_cp_a", func(b *testing.B) {
		b.SetBytes(total)
		var takeT, cpT, cpSyncT time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			root := filepath.Join(dir, "cold-"+strconv.Itoa(i))
			dst := filepath.Join(dir, "cp-"+strconv.Itoa(i))
			syncAllFS()
			t0 := time.Now()
			out, err := exec.Command("cp", "-a", W+"/data", dst).CombinedOutput()
			if err != nil {
				b.Fatalf("cp -a: %v %s", err, out)
			}
			cpT += time.Since(t0)
			syncAllFS()
			cpSyncT += time.Since(t0)
			os.RemoveAll(dst)
			syncAllFS()
			b.StartTimer()
			t1 := time.Now()
			s, err := Take(context.Background(), rs, Options{Dir: root, Session: "cold"})
			takeT += time.Since(t1)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if s.Stats.Copied != len(files) {
				b.Fatalf("cold Take copied %d of %d files", s.Stats.Copied, len(files))
			}
			os.RemoveAll(root)
			syncAllFS()
			b.StartTimer()
		}
		mb := float64(total) * float64(b.N) / 1e6
		b.ReportMetric(mb/takeT.Seconds(), "take_MB/s")
		b.ReportMetric(mb/cpT.Seconds(), "cp_a_MB/s")
		b.ReportMetric(cpT.Seconds()/takeT.Seconds(), "x_cp_a")
		b.ReportMetric(cpSyncT.Seconds()/takeT.Seconds(), "x_cp_a+sync")
	})

	root := filepath.Join(dir, "backups")
	base, err := Take(context.Background(), rs, Options{Dir: root, Session: "base"})
	if err != nil {
		b.Fatal(err)
	}
	syncAllFS()

	warm := 0
	b.Run("warm", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			warm++
			s, err := Take(context.Background(), rs, Options{Dir: root, Session: "warm-" + strconv.Itoa(warm)})
			if err != nil {
				b.Fatal(err)
			}
			if s.Stats.Copied != 0 || s.Stats.Hashed != 0 {
				b.Fatalf("warm Take read content: %+v", s.Stats)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/take")
	})

	b.Run("restore_100_changed", func(b *testing.B) {
		rng := rand.New(rand.NewSource(7))
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			for k := 0; k < 100; k++ {
				p := files[(i*100+k*97)%len(files)]
				data, err := os.ReadFile(p)
				if err != nil {
					b.Fatal(err)
				}
				rng.Read(data[:16])
				if err := os.WriteFile(p, data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			syncAllFS()
			b.StartTimer()
			rep, err := base.Restore(context.Background())
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, e := range rep.Entries {
				if e.Action == Restored && filepath.Base(e.Path)[0] == 'f' {
					n++
				}
			}
			if n != 100 {
				b.Fatalf("restored %d files, want 100", n)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/restore")
	})
}

// diskBytes is the space a tree takes (st_blocks of every file and
// directory in it).
func diskBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		n += info.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkSparse measures, on a real disk, the backup (a cold Take, into
// a new backup root) and the Restore (after a write into a hole, in
// place) of a 4 GiB file holding 1 MB of data in 16 runs, against `cp
// --sparse=always` of the same file in the same run as the floor. It
// reports seconds and backup bytes (goals: <= 0.5 s each, <= 2 MB).
// Run it with
//
//	go test -run '^$' -bench BenchmarkSparse -benchtime 2x ./snapshot/
func BenchmarkSparse(b *testing.B) {
	dir := diskTempDir(b)
	b.Cleanup(func() { os.RemoveAll(dir) })
	W := filepath.Join(dir, "w")
	img := filepath.Join(W, "data", "disk.img")
	var runs []run
	for i := int64(0); i < 16; i++ {
		runs = append(runs, run{i*(256<<20) + i*4096 + 512, rnd(i, 64<<10)})
	}
	makeSparse(b, img, 4<<30, runs...)
	rs := &policy.Ruleset{Workdir: W, Files: []policy.PathRule{rule(W+"/data", policy.MatchSubtree, policy.Mutates)}}
	syncAllFS()
	var takeT, restoreT, cpT time.Duration
	var backupBytes int64
	for i := 0; i < b.N; i++ {
		cp := filepath.Join(dir, "cp.img")
		syncAllFS()
		t0 := time.Now()
		if out, err := exec.Command("cp", "--sparse=always", img, cp).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		cpT += time.Since(t0)
		os.Remove(cp)
		root := filepath.Join(dir, "backups-"+strconv.Itoa(i))
		syncAllFS()
		t1 := time.Now()
		s, err := Take(context.Background(), rs, Options{Dir: root, Session: "s"})
		takeT += time.Since(t1)
		if err != nil {
			b.Fatal(err)
		}
		if s.Stats.Copied != 1 {
			b.Fatalf("Take: %+v", s.Stats)
		}
		backupBytes += diskBytes(b, root)
		f, err := os.OpenFile(img, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		f.WriteAt([]byte("agent"), 3<<30)
		f.Close()
		syncAllFS()
		t2 := time.Now()
		rep, err := s.Restore(context.Background())
		restoreT += time.Since(t2)
		if err != nil || rep.Count(Restored) != 1 {
			b.Fatalf("Restore: %v %+v", err, rep.Changed())
		}
		if h, _, err := hashPath(img); err != nil || h != recordedEntry(b, s, img).Hash {
			b.Fatalf("restored file hashes to %s (%v)", h, err)
		}
		os.RemoveAll(root)
	}
	n := float64(b.N)
	b.ReportMetric(takeT.Seconds()/n, "backup_s")
	b.ReportMetric(restoreT.Seconds()/n, "restore_s")
	b.ReportMetric(float64(backupBytes)/n, "backup_bytes")
	b.ReportMetric(cpT.Seconds()/n, "cp_sparse_s")
	b.ReportMetric(takeT.Seconds()/cpT.Seconds(), "backup_x_cp")
	b.ReportMetric(restoreT.Seconds()/cpT.Seconds(), "restore_x_cp")
}
