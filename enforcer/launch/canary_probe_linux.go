//go:build linux

package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"golang.org/x/sys/unix"
)

// Probe is where ProbeCanaries tries a session's canaries: its cgroup,
// the network namespace its agent connects from (nil: klock's own) and,
// for a wall that decides only once the session is armed (bpf-lsm waiting
// for the agent's exec), Register, which has it decide for the probe's
// pid until the release it returns.
type Probe struct {
	Group    *cgroup.Group
	Netns    *os.File
	Register func(pid int) (release func(), err error)
	// Helper is klock-stage2's path ("" for the default beside the
	// running binary; the running binary when there is none).
	Helper string
}

// ProbeCanaries tries c (PlanCanaries' stage-2 part) from outside the
// agent: a process klock starts in its own mount namespace makes the
// canaries' files on a tmpfs only it sees, joins pr's network namespace
// and then pr's cgroup, and tries each canary there, under every wall
// the cgroup has (stage2.ProbeInit). It is how a container adopted
// through OCI hooks alone, which runs no klock code inside, proves its
// walls before the runtime execs the entrypoint. The report is read as
// a container's stage 2's (Adopt, with skipped): a strict refusal is the
// Process's CanaryError.
func ProbeCanaries(ctx context.Context, c *stage2.Canary, skipped []CanaryResult, pr Probe) (*AdoptedCanaries, error) {
	if c.Write || c.Exec {
		if err := makeCanaryMountPoint(c); err != nil {
			return nil, err
		}
	}
	report, err := probeOnce(ctx, c, pr, OpenHelper(pr.Helper))
	if err != nil {
		// A klock-stage2 of another build may not know the probe: the
		// running binary is one, only slower to start.
		report, err = probeOnce(ctx, c, pr, nil)
	}
	if err != nil {
		return nil, err
	}
	return &AdoptedCanaries{Report: report, Skipped: skipped}, nil
}

// probeOnce runs the probe from bin (nil: the running binary; closed
// here) and returns the read end of its report, non-blocking for Adopt's
// reader (canaryReader).
func probeOnce(ctx context.Context, c *stage2.Canary, pr Probe, bin *os.File) (*os.File, error) {
	if bin != nil {
		defer bin.Close()
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("launch: canary probe: %w", err)
	}
	report, w := os.NewFile(uintptr(p[0]), "canary-report"), os.NewFile(uintptr(p[1]), "canary-probe")
	err := runProbe(ctx, c, pr, bin, w)
	w.Close()
	if err == nil {
		err = unix.SetNonblock(p[0], true)
	}
	if err != nil {
		report.Close()
		return nil, err
	}
	return report, nil
}

// runProbe starts the probe from bin (nil: the running binary),
// registers it, sends it c and waits for it: its report is in out when
// it returns nil.
func runProbe(ctx context.Context, c *stage2.Canary, pr Probe, bin, out *os.File) error {
	cg, err := pr.Group.OpenFD()
	if err != nil {
		return err
	}
	defer cg.Close()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	if bin != nil {
		cmd = exec.CommandContext(ctx, "/proc/self/fd/3")
		cmd.ExtraFiles = []*os.File{bin} // exec'd by its descriptor: nothing swapped in by path
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, cg)
	cgfd, netfd := 2+len(cmd.ExtraFiles), -1
	if pr.Netns != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, pr.Netns)
		netfd = 2 + len(cmd.ExtraFiles)
	}
	cmd.Env = []string{fmt.Sprintf("%s=%d,%d", stage2.ProbeEnv, cgfd, netfd)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // its tmpfs is its own
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("launch: canary probe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launch: canary probe: %w", err)
	}
	release := func() {}
	if pr.Register != nil {
		if release, err = pr.Register(cmd.Process.Pid); err != nil {
			in.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("launch: canary probe: %w", err)
		}
	}
	defer release()
	err = json.NewEncoder(in).Encode(c)
	in.Close()
	werr := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err != nil:
		return fmt.Errorf("launch: canary probe: send its canaries: %w (%s)", err, bytes.TrimSpace(stderr.Bytes()))
	case werr != nil && !(errors.As(werr, &ee) && ee.ExitCode() == stage2.FailExit):
		// FailExit is its report's refusal; anything else ended it
		// before it could report.
		return fmt.Errorf("launch: canary probe: %w (%s)", werr, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
