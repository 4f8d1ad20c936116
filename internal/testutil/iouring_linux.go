package testutil

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring opcodes and SQE flags (include/uapi/linux/io_uring.h).
const (
	iouringOpOpenat   = 18
	iouringOpRenameat = 35
	// IOSQEAsync forces an operation to the ring's io-wq worker threads
	// (IOSQE_ASYNC) instead of trying it inline in the submitting task.
	IOSQEAsync = 1 << 4
)

// IOURingOpenat opens path with openat(AT_FDCWD, path, flags) submitted
// through an io_uring instead of a system call, and returns the new fd or
// the operation's errno. The tests use it to show that a backend decides
// io_uring operations, which never pass a syscall tracepoint.
func IOURingOpenat(path string, flags int) (int, error) {
	return IOURingOpenatFlags(path, flags, 0)
}

// IOURingOpenatFlags is IOURingOpenat with SQE flags (IOSQEAsync).
func IOURingOpenatFlags(path string, flags int, sqeFlags uint8) (int, error) {
	name, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	res, err := iouringSubmit(func(sqe []byte) {
		sqe[0], sqe[1] = iouringOpOpenat, sqeFlags
		*(*int32)(unsafe.Pointer(&sqe[4])) = unix.AT_FDCWD
		*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(name)))
		*(*uint32)(unsafe.Pointer(&sqe[28])) = uint32(flags)
	})
	// The kernel reads the name through a bare address the collector
	// does not see: name must live until the operation completed.
	runtime.KeepAlive(name)
	return res, err
}

// IOURingRenameat renames from to to (renameat2(AT_FDCWD, from, AT_FDCWD,
// to, 0)) through an io_uring, with SQE flags (IOSQEAsync).
func IOURingRenameat(from, to string, sqeFlags uint8) error {
	old, err := unix.BytePtrFromString(from)
	if err != nil {
		return err
	}
	nw, err := unix.BytePtrFromString(to)
	if err != nil {
		return err
	}
	_, err = iouringSubmit(func(sqe []byte) {
		sqe[0], sqe[1] = iouringOpRenameat, sqeFlags
		*(*int32)(unsafe.Pointer(&sqe[4])) = unix.AT_FDCWD                        // old dfd
		*(*uint64)(unsafe.Pointer(&sqe[8])) = uint64(uintptr(unsafe.Pointer(nw))) // addr2: new path
		*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(old)))
		*(*int32)(unsafe.Pointer(&sqe[24])) = unix.AT_FDCWD // len: new dfd
	})
	runtime.KeepAlive(old)
	runtime.KeepAlive(nw)
	return err
}

// iouringSubmit sets up a one-entry ring, submits the SQE fill writes,
// waits for its completion and returns its result (an errno when < 0).
func iouringSubmit(fill func(sqe []byte)) (int, error) {
	// struct io_uring_params: 10 u32 then sq_off (10 u32) and cq_off (10 u32).
	var p [30]uint32
	ringFD, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p[0])), 0)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(int(ringFD))
	sqEntries, cqEntries := p[0], p[1]
	sq, cq := p[10:20], p[20:30] // head, tail, ring_mask, ring_entries, flags/overflow, dropped/cqes, array/flags
	sqRing, err := unix.Mmap(int(ringFD), 0, int(sq[6]+sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, err
	}
	defer unix.Munmap(sqRing)
	cqRing, err := unix.Mmap(int(ringFD), 0x8000000, int(cq[5]+cqEntries*16), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, err
	}
	defer unix.Munmap(cqRing)
	sqes, err := unix.Mmap(int(ringFD), 0x10000000, int(sqEntries*64), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, err
	}
	defer unix.Munmap(sqes)

	sqe := sqes[:64]
	clear(sqe)
	fill(sqe)
	tail := (*uint32)(unsafe.Pointer(&sqRing[sq[1]]))
	mask := *(*uint32)(unsafe.Pointer(&sqRing[sq[2]]))
	t := atomic.LoadUint32(tail)
	*(*uint32)(unsafe.Pointer(&sqRing[sq[6]+(t&mask)*4])) = 0
	atomic.StoreUint32(tail, t+1)
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, ringFD, 1, 1, 1 /* IORING_ENTER_GETEVENTS */, 0, 0); e != 0 && e != unix.EINTR {
		return -1, e
	}
	// io_uring_enter returns once the entry is submitted when a signal
	// (the Go runtime's preemption signal, often) cuts its wait short:
	// the completion may not be there yet. Read it only once the
	// kernel has posted it (the queue's tail moved past its head).
	head := atomic.LoadUint32((*uint32)(unsafe.Pointer(&cqRing[cq[0]])))
	for atomic.LoadUint32((*uint32)(unsafe.Pointer(&cqRing[cq[1]]))) == head {
		// An entry the kernel has not consumed yet (a signal before the
		// submission) is submitted again.
		unsubmitted := t + 1 - atomic.LoadUint32((*uint32)(unsafe.Pointer(&sqRing[sq[0]])))
		if _, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, ringFD, uintptr(unsubmitted), 1, 1, 0, 0); e != 0 && e != unix.EINTR {
			return -1, e
		}
	}
	cmask := *(*uint32)(unsafe.Pointer(&cqRing[cq[2]]))
	res := *(*int32)(unsafe.Pointer(&cqRing[cq[5]+(head&cmask)*16+8]))
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&cqRing[cq[0]])), head+1)
	if res < 0 {
		return -1, unix.Errno(-res)
	}
	return int(res), nil
}
