//go:build linux

package snapshot

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

const (
	crashRootEnv = "KLOCK_SNAPSHOT_CRASH_ROOT"
	crashAtEnv   = "KLOCK_SNAPSHOT_CRASH_AT"
)

// killAtOp makes the at-th file-system operation of Restore (testHook)
// SIGKILL the process: kill -9, no cleanup.
func killAtOp(at int) {
	var n atomic.Int64
	testHook = func(op, p string) {
		if n.Add(1) == int64(at) {
			unix.Kill(os.Getpid(), unix.SIGKILL)
			time.Sleep(time.Hour)
		}
	}
}

// TestRestoreCrashChild is not a test: TestRestoreCrash re-executes the
// test binary with it selected, and it runs Restore until the crashAtEnv-th
// file-system operation, where it SIGKILLs itself (kill -9, no cleanup).
func TestRestoreCrashChild(t *testing.T) {
	root := os.Getenv(crashRootEnv)
	if root == "" {
		return
	}
	at, _ := strconv.Atoi(os.Getenv(crashAtEnv))
	killAtOp(at)
	s, err := Open(root, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreCrash kills a restore (in a child process, SIGKILL) at 60
// points spread over every file-system operation it makes, some of them
// twice in a row (a crash during the resumed restore), then restores again
// in-process: the tree must be identical to the snapshot every time.
func TestRestoreCrash(t *testing.T) {
	testutil.RequirePrivileged(t)
	// How many operations does one full restore of allAtOnce make?
	f := newFixture(t)
	s := f.take(t, "s1")
	before := treeState(t, f.W)
	allAtOnce(t, f.W)
	var ops atomic.Int64
	testHook = func(string, string) { ops.Add(1) }
	_, err := s.Restore(context.Background())
	testHook = nil
	total := int(ops.Load())
	must(t, err)
	requireSameTree(t, "uninterrupted restore", before, treeState(t, f.W))
	if total < 30 {
		t.Fatalf("only %d operations: the fixture is too small to test crashes", total)
	}

	const runs = 60
	rng := rand.New(rand.NewSource(6))
	killed, resumed := 0, 0
	deadline := time.Now().Add(45 * time.Second)
	for k := 0; k < runs; k++ {
		if time.Now().After(deadline) {
			t.Fatalf("crash test over its time budget after %d runs", k)
		}
		f := newFixture(t)
		s := f.take(t, "s1")
		before := treeState(t, f.W)
		allAtOnce(t, f.W)
		root := filepath.Dir(s.Dir())
		// Spread the kill points over [1, total], jittered, deterministic.
		at := 1 + k*total/runs + rng.Intn(max(1, total/runs))
		kills := []int{at}
		if k%4 == 3 {
			kills = append(kills, 1+rng.Intn(total))
		}
		for _, at := range kills {
			cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashRootEnv+"="+root, crashAtEnv+"="+strconv.Itoa(at))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
				killed++
			case err == nil:
				// The restore finished before op #at (a resumed run does less).
			default:
				t.Fatalf("run %d: child (kill at op %d): %v\n%s", k, at, err, out)
			}
		}
		s2, err := Open(root, "s1")
		must(t, err)
		rep, err := s2.Restore(context.Background())
		if err != nil {
			t.Fatalf("run %d (killed at %v): restore after crash: %v\n%v", k, kills, err, rep.Failed())
		}
		if rep.Resumed {
			resumed++
		}
		requireSameTree(t, "run "+strconv.Itoa(k)+" killed at op "+strconv.Itoa(at), before, treeState(t, f.W))
		// No temp file survives anywhere in the tree.
		filepath.Walk(f.W, func(p string, info os.FileInfo, err error) error {
			if err == nil && len(filepath.Base(p)) > 11 && filepath.Base(p)[:11] == ".klock-rst-" {
				t.Errorf("run %d: temp file left: %s", k, p)
			}
			return nil
		})
	}
	t.Logf("%d runs, %d restores killed by SIGKILL, %d resumed (ops per restore: %d)", runs, killed, resumed, total)
	if killed < 50 {
		t.Errorf("only %d kills; want at least 50", killed)
	}
}
