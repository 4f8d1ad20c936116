package testutil

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MkdirsInZappedPage makes n directories in dir (dir/d0, dir/d1, ... by
// absolute name), then makes
// each again (EEXIST, as mkdir -p and os.makedirs(exist_ok=True) do), and,
// with remove, removes them. Every name is written into a page of a shared
// memfd mapping that another thread keeps unmapping from the page tables
// (MADV_DONTNEED; the memfd keeps the bytes), as reclaim or compaction can:
// the kernel faults the page back in to copy the name, and a read of it
// from a BPF program at the syscall's exit, which cannot fault, often finds
// it gone. The page stays mapped until the process exits (a reader of the
// process's memory finds the last name there). It returns the first error
// other than EEXIST on the second pass.
func MkdirsInZappedPage(dir string, n int, remove bool) error {
	fd, err := unix.MemfdCreate("klock-zapped", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	size := os.Getpagesize()
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return err
	}
	page, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		for !stop.Load() {
			_ = unix.Madvise(page, unix.MADV_DONTNEED)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	call := func(nr uintptr, i int, args ...uintptr) unix.Errno {
		copy(page, append(strconv.AppendInt([]byte(dir+"/d"), int64(i), 10), 0))
		cwd := unix.AT_FDCWD
		a := append([]uintptr{uintptr(cwd), uintptr(unsafe.Pointer(&page[0]))}, args...)
		_, _, e := unix.Syscall(nr, a[0], a[1], a[2])
		return e
	}
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < n; i++ {
			if e := call(unix.SYS_MKDIRAT, i, 0o755); e != 0 && (pass == 0 || e != unix.EEXIST) {
				return e
			}
		}
	}
	if remove {
		for i := 0; i < n; i++ {
			if e := call(unix.SYS_UNLINKAT, i, unix.AT_REMOVEDIR); e != 0 {
				return e
			}
		}
	}
	return nil
}
