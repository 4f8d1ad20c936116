package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/klocklabs/klock/enforcer/oci"
	"golang.org/x/sys/unix"
)

// findBinaries finds klock (the hooks run it) and klock-stage2 (copied
// into the container's state directory): beside klock-runtime first,
// else beside klock on PATH. A missing one refuses the container: without
// it there would be no hook (no session) or no wall.
func findBinaries() (klock, stage2 string, err error) {
	dirs := []string{}
	if d := exeDir(); d != "" {
		dirs = append(dirs, d)
	}
	if p, err := exec.LookPath("klock"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			dirs = append(dirs, filepath.Dir(abs))
		}
	}
	find := func(name string) string {
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
				return p
			}
		}
		return ""
	}
	if klock = find("klock"); klock == "" {
		return "", "", fmt.Errorf("klock is neither beside klock-runtime (%s) nor on PATH: the container's hooks run it; install klock beside klock-runtime (make build puts both in bin/)", exeDir())
	}
	if stage2 = find("klock-stage2"); stage2 == "" {
		return "", "", fmt.Errorf("klock-stage2 is neither beside klock-runtime (%s) nor beside klock (%s): it raises the wall inside the container; install it beside them (make build puts bin/klock-stage2 there)", exeDir(), filepath.Dir(klock))
	}
	return klock, stage2, nil
}

// makeStateDir makes <stateRoot>/<id> and copies klock-stage2 into it.
// stateRoot is 0700 root: only root reaches the containers' state from
// the host. <id> itself is 0711 because it is bound at /dev/.klock inside
// the container, where the agent (65534, no capabilities) must exec
// klock-stage2 and stage 2 read wall.json, without listing anything.
func makeStateDir(id, stage2 string) (string, error) {
	if err := os.MkdirAll(stateRoot, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chmod(stateRoot, 0o700); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	dir := filepath.Join(stateRoot, id)
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if err := linkStage2(stage2, filepath.Join(dir, "klock-stage2")); err != nil {
		return "", fmt.Errorf("copy klock-stage2 into %s: %w", dir, err)
	}
	if err := makeCanaryPipe(filepath.Join(dir, oci.CanaryFileName)); err != nil {
		return "", fmt.Errorf("state directory: the canaries' report pipe: %w", err)
	}
	if err := makeRelease(filepath.Join(dir, oci.ReleaseFileName)); err != nil {
		return "", fmt.Errorf("state directory: the entrypoint's release: %w", err)
	}
	return dir, nil
}

// makeRelease makes the entrypoint's release (oci.ReleaseFileName) empty,
// root's, 0644: klockd writes it, every stage 2 in the container reads it.
// A state directory of the same id made before starts empty again: a
// release left from another container never lets this one's entrypoint go.
func makeRelease(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil { // past the umask
		f.Close()
		return err
	}
	return f.Close()
}

// makeCanaryPipe makes the pipe the entrypoint's stage 2 reports its
// canaries on (oci.CanaryFileName): root's, 0622, so the container's user
// may write it and nobody but root read it.
func makeCanaryPipe(p string) error {
	if err := unix.Mkfifo(p, 0o622); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeNamedPipe == 0 {
		return fmt.Errorf("%s is not a pipe", p)
	}
	return os.Chmod(p, 0o622) // past the umask
}

// linkStage2 puts klock-stage2 at dst as a hard link to one copy kept in
// stateRoot per installed binary (named by its inode, size and mtime, so
// a new install gets a new copy): a container's start then writes no
// 3.5 MB copy, which the backup's syncfs of the same filesystem would
// also have to flush. The copy is root's, 0755, and reached only through
// the read-only bind of the container's state directory. A filesystem
// without hard links gets a copy of its own, as before.
func linkStage2(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return copyExecutable(src, dst)
	}
	// "@" is in no container id (validID): no state directory has this name.
	shared := filepath.Join(stateRoot, fmt.Sprintf("klock-stage2@%x-%x-%x-%x", sys.Dev, sys.Ino, st.Size(), st.ModTime().UnixNano()))
	if _, err := os.Stat(shared); err != nil {
		if err := copyExecutable(src, shared); err != nil {
			return err
		}
		sweepStage2Copies(shared)
	}
	// Linked under a temporary name and renamed: a container of the same
	// id still running keeps the binary it exec'd.
	tmp := dst + ".klock-link"
	_ = os.Remove(tmp)
	if err := os.Link(shared, tmp); err != nil {
		return copyExecutable(src, dst)
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// sweepStage2Copies removes the copies of earlier installs that no
// container links any more (a link count of one: the copy's own name).
// The state root is a tmpfs: each copy left is 3.5 MB of memory, one per
// install (or per build, on a host that builds klock). A copy a container
// still links stays until the next new install after that container is
// deleted. A create of an earlier install racing this finds its copy gone
// and copies the binary into its own state directory (linkStage2).
func sweepStage2Copies(keep string) {
	old, _ := filepath.Glob(filepath.Join(stateRoot, "klock-stage2@*"))
	for _, p := range old {
		var st unix.Stat_t
		if p == keep || unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
			continue
		}
		_ = os.Remove(p)
	}
}

// copyExecutable copies src to dst through a temporary file and a rename:
// a container of the same id still running keeps the binary it exec'd.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".klock-stage2-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
