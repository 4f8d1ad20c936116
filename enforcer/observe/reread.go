//go:build linux && (amd64 || arm64)

package observe

import (
	"bytes"
	"os"
	"strconv"
)

// pathMax is the longest path the kernel takes (PATH_MAX with its NUL).
const pathMax = len(zr.Path0)

// rereadOp: the operations whose path may be read again from the process
// when the BPF read of it faulted: each is mediated by a kernel
// file wall (Landlock's MAKE_*, REMOVE_*, REFER and write rights, or
// bpf-lsm's path hooks), which judged the kernel's own copy of the name.
// Metadata calls and socket addresses have no such wall: a name the process
// could rewrite after the call is not read back for them (they fail closed).
func rereadOp(o op) bool {
	switch o {
	case opOpen, opMkdir, opMknod, opUnlink, opRmdir, opRename, opLink, opSymlink:
		return true
	}
	return false
}

// rereadFaulted reads path0 and path1 again from the process's memory
// (/proc/<tid>/mem, which faults pages in as the kernel did) where the BPF
// read faulted, for the operations rereadOp allows. It reports whether it
// filled one; o.reread counts them.
func (o *Observer) rereadFaulted(r *raw) bool {
	if r.kflags&(fFault0|fFault1) == 0 || !rereadOp(r.op) {
		return false
	}
	again := false
	if r.kflags&fFault0 != 0 && r.uptr0 != 0 {
		if p, ok := readUserString(r.tid, r.pid, r.uptr0); ok {
			r.path0, again = p, true
			r.kflags &^= fFault0
		}
	}
	// path1's buffer carries the kernel's path of the object when the
	// BPF program walked one (kpath, kbase): then path1 was not faulted.
	if r.kflags&fFault1 != 0 && r.uptr1 != 0 && r.kpath == "" && r.kbase == "" {
		if p, ok := readUserString(r.tid, r.pid, r.uptr1); ok {
			r.path1, again = p, true
			r.kflags &^= fFault1
		}
	}
	if again {
		o.reread.Add(1)
	}
	return again
}

// readUserString reads a NUL-terminated string of at most pathMax bytes at
// addr in the memory of thread tid, or of its process pid once the thread
// has exited (its threads share one address space). ok is false when both
// are gone or the memory cannot be read.
func readUserString(tid, pid uint32, addr uint64) ([]byte, bool) {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/mem")
	if err != nil && pid != tid {
		f, err = os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/mem")
	}
	if err != nil {
		return nil, false
	}
	defer f.Close()
	page := uint64(os.Getpagesize())
	var out []byte
	for len(out) < pathMax {
		// Up to the end of the page: the next one may not be mapped.
		n := min(page-(addr+uint64(len(out)))%page, uint64(pathMax-len(out)))
		buf := make([]byte, n)
		got, err := f.ReadAt(buf, int64(addr)+int64(len(out)))
		if got > 0 {
			if i := bytes.IndexByte(buf[:got], 0); i >= 0 {
				return append(out, buf[:i]...), true
			}
			out = append(out, buf[:got]...)
		}
		if err != nil || got < len(buf) {
			return nil, false
		}
	}
	return nil, false
}

// unverified: a source that a string resolved in user space vouched for
// says best effort once the string itself was read after the fact.
func unverified(s PathSource) PathSource {
	if s == PathVerified {
		return PathBestEffort
	}
	return s
}
