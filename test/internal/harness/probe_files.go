package harness

import (
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// fileStep runs the probe steps that imitate what real tools do with
// their files (so the VM, which has no python, runs them too). ok is false
// for an op it does not know.
func fileStep(op, arg string) (ok bool, err error) {
	switch op {
	case "unnamed": // in DIR: make a file, unlink it, then write, truncate, chmod and retime it through its fd; then the same with O_TMPFILE (pytest's capture)
		return true, unnamedOps(arg)
	case "chmod-rename": // DIR>N: N times, make tmpI, chmod it by name, rename it to INSTALLERI (pip's generated files)
		dir, n := two(arg)
		count, err := strconv.Atoi(n)
		if err != nil {
			return true, err
		}
		return true, chmodRename(dir, count)
	}
	return false, nil
}

func unnamedOps(dir string) error {
	p := filepath.Join(dir, "unnamed-probe")
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Unlink(p); err != nil {
		return fmt.Errorf("unlink: %w", err)
	}
	if err := fdOps(fd); err != nil {
		return err
	}
	tfd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("O_TMPFILE: %w", err)
	}
	defer unix.Close(tfd)
	return fdOps(tfd)
}

func fdOps(fd int) error {
	if _, err := unix.Write(fd, []byte("x")); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("ftruncate: %w", err)
	}
	if err := unix.Fchmod(fd, 0o640); err != nil {
		return fmt.Errorf("fchmod: %w", err)
	}
	// futimens(fd, NULL): utimensat with a NULL path.
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("futimens: %w", e)
	}
	return nil
}

func chmodRename(dir string, n int) error {
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	for i := range n {
		t := "tmp" + strconv.Itoa(i)
		fd, err := unix.Open(t, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		_, werr := unix.Write(fd, []byte("pip\n"))
		ferr := unix.Fchmod(fd, 0o644)
		unix.Close(fd)
		if werr != nil || ferr != nil {
			return fmt.Errorf("write %v, fchmod %v", werr, ferr)
		}
		if err := unix.Chmod(t, 0o644); err != nil {
			return err
		}
		if err := unix.Rename(t, "INSTALLER"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}
