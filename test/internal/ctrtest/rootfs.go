//go:build linux

package ctrtest

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
)

// BusyboxPath is Debian's static busybox (package busybox-static,
// scripts/deps.sh vm): static, so the rootfs needs no libc.
const BusyboxPath = "/bin/busybox"

// Applets are the busybox applets a rootfs links in /bin, those this
// busybox has (ping, nc and wget are optional builds).
var Applets = []string{
	"sh", "cat", "echo", "ls", "rm", "mkdir", "touch", "sleep", "wc", "dd", "head",
	"ping", "nc", "wget", "true", "false", "id", "cp", "mv", "ln", "chmod", "stat",
	"env", "grep", "sed", "tr", "cut", "test", "[", "printf", "kill", "ps", "ip",
	"readlink", "realpath", "cmp", "sha256sum", "truncate", "mkfifo", "tail", "xargs",
}

// BusyboxRootfs builds a root filesystem in dir (created): /bin/busybox with
// the Applets' symlinks, /etc/passwd and /etc/group naming root and nobody
// (65534), a 1777 /tmp and an empty /workspace to bind the workdir over. It
// returns dir. No busybox is Unavailable.
func BusyboxRootfs(t testing.TB, dir string) string {
	t.Helper()
	if _, err := os.Stat(BusyboxPath); err != nil {
		testutil.Unavailable(t, "no "+BusyboxPath+" (install busybox-static: scripts/deps.sh vm)")
	}
	list, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	have := map[string]bool{}
	for _, a := range strings.Fields(string(list)) {
		have[a] = true
	}
	for _, d := range []string{"bin", "etc", "tmp", "workspace", "proc", "sys", "dev", "root"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	must(t, os.Chmod(filepath.Join(dir, "tmp"), 0o1777))
	bb, err := os.ReadFile(BusyboxPath)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "bin", "busybox"), bb, 0o755))
	for _, a := range Applets {
		if have[a] {
			must(t, os.Symlink("busybox", filepath.Join(dir, "bin", a)))
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "etc", "passwd"),
		[]byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "etc", "group"),
		[]byte("root:x:0:\nnogroup:x:65534:\n"), 0o644))
	return dir
}

// RootfsTar writes the tree rootfs as an uncompressed tar at out (what
// `podman import`, `docker import` and an OCI layer take) and returns out.
func RootfsTar(t testing.TB, rootfs, out string) string {
	t.Helper()
	f, err := os.Create(out)
	must(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == rootfs {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		h.Name = "./" + filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	must(t, err)
	must(t, tw.Close())
	must(t, f.Close())
	return out
}

// OCIArchive writes an OCI image layout tarball at out holding one image
// named name (e.g. "docker.io/klock/busybox:latest") whose single layer is
// rootfs's tar: what `ctr image import` takes (it reads the name from the
// io.containerd.image.name annotation). Entrypoint-less: Cmd is sh.
func OCIArchive(t testing.TB, rootfs, name, out string) string {
	t.Helper()
	return OCIArchiveCmd(t, rootfs, name, out, []string{"sh"})
}

// OCIArchiveCmd is OCIArchive with the image's Cmd.
func OCIArchiveCmd(t testing.TB, rootfs, name, out string, cmd []string) string {
	t.Helper()
	dir := t.TempDir()
	layer := RootfsTar(t, rootfs, filepath.Join(dir, "layer.tar"))
	lb, err := os.ReadFile(layer)
	must(t, err)
	blobs := map[string][]byte{}
	put := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return d, len(b)
	}
	desc := func(mt string, b []byte) map[string]any {
		d, n := put(b)
		return map[string]any{"mediaType": mt, "digest": d, "size": n}
	}
	ld := desc("application/vnd.oci.image.layer.v1.tar", lb)
	cfg := mustJSON(t, map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": cmd},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{ld["digest"].(string)}},
	})
	man := mustJSON(t, map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", cfg),
		"layers": []any{ld},
	})
	md := desc("application/vnd.oci.image.manifest.v1+json", man)
	tag := name[strings.LastIndex(name, ":")+1:]
	md["annotations"] = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}
	index := mustJSON(t, map[string]any{"schemaVersion": 2, "manifests": []any{md}})

	f, err := os.Create(out)
	must(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, b []byte) {
		must(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(b)
		must(t, err)
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add("index.json", index)
	for d, b := range blobs {
		add("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	must(t, tw.Close())
	must(t, f.Close())
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(fmt.Errorf("ctrtest: %w", err))
	}
	return b
}

// HostLikeRootfs is busybox's root file system shaped as the host's: where
// the host's /bin, /sbin, /lib or /lib64 is a link (a merged /usr), the
// rootfs has the same link; with HostSystemBinds over it, every program and
// library of the host has the same path inside (git, make, the test
// binary), and busybox fills the rest.
func HostLikeRootfs(t testing.TB, dir string) string {
	t.Helper()
	rootfs := BusyboxRootfs(t, dir)
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		target, err := os.Readlink(d)
		if err != nil {
			continue
		}
		p := filepath.Join(rootfs, d)
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.MkdirAll(filepath.Join(rootfs, "usr"), 0o755))
	return rootfs
}

// HostSystemBinds bind the host's /usr (and /bin, /sbin, /lib, /lib64 where
// they are directories, not links) read-only at their own paths.
func HostSystemBinds() []Bind {
	var binds []Bind
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"} {
		if st, err := os.Lstat(d); err == nil && st.IsDir() {
			binds = append(binds, Bind{Host: d, Container: d, ReadOnly: true})
		}
	}
	return binds
}
