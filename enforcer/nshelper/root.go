//go:build linux

package nshelper

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NsRootEnv marks the helper process: "NSFD,SOCKFD".
const NsRootEnv = "_KLOCK_NSROOT"

// ErrHelper: the helper process failed.
var ErrHelper = errors.New("nshelper: the helper process failed")

// Init is the helpers' entry point: in a process started by OpenView or
// SetMemfdNoexec it never returns; in any other it returns at once.
func Init() {
	sysctlInit()
	v, ok := os.LookupEnv(NsRootEnv)
	if !ok {
		return
	}
	ns, sock, ok := strings.Cut(v, ",")
	nsfd, err1 := strconv.Atoi(ns)
	sockfd, err2 := strconv.Atoi(sock)
	if !ok || err1 != nil || err2 != nil {
		os.Exit(2)
	}
	runtime.LockOSThread()
	// The host's procfs, held before the join: the namespace's own /proc
	// (if it has one) belongs to a pid namespace this process is not in.
	proc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Exit(3)
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		os.Exit(3)
	}
	if err := unix.Setns(nsfd, unix.CLONE_NEWNS); err != nil {
		os.Exit(4)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Exit(5)
	}
	// This thread's mountinfo, opened now, shows the namespace's mounts
	// relative to its root for as long as the descriptor lives (the open
	// file holds both), whoever reads it.
	mi, err := unix.Openat(proc, "thread-self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Exit(5)
	}
	if err := unix.Sendmsg(sockfd, []byte{1}, unix.UnixRights(fd, mi), nil, 0); err != nil {
		os.Exit(6)
	}
	os.Exit(0)
}

// View is a mount namespace as a process inside it sees it.
type View struct {
	// Root is the namespace's root directory (O_PATH).
	Root *os.File
	// Mountinfo is a mountinfo of the namespace, mount points relative to
	// Root: read from offset 0, it gives the table as it is at that time.
	Mountinfo *os.File
}

// Close closes both descriptors.
func (v *View) Close() error {
	return errors.Join(v.Root.Close(), v.Mountinfo.Close())
}

// OpenLiveView returns the root directory and the mount table of the
// mount namespace of process pid, through /proc, without a helper
// process: for a process whose root is its namespace's (it made no
// pivot_root or chroot: klock run's stage 2) and whose pid names it
// until the caller reaps it (a child not yet waited for). The two stay
// valid after it exits: the open mountinfo holds its namespace and root,
// as the helper's does.
func OpenLiveView(pid int) (*View, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	root, err := os.OpenFile(dir+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nshelper: %w", err)
	}
	mi, err := os.Open(dir + "/mountinfo")
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("nshelper: %w", err)
	}
	return &View{Root: root, Mountinfo: mi}, nil
}

// OpenView returns the root directory and the mount table of the mount
// namespace ns (an open /proc/<pid>/ns/mnt). Both stay valid after every
// process of the namespace has exited, as long as ns is held. With
// Binary, the helper process is that small binary rather than the
// running one re-executed (klockd's package initialisation is most of
// the helper's cost).
func OpenView(ns *os.File, opts ...Option) (*View, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nshelper: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(pair[0]), "nshelper")
	theirs := os.NewFile(uintptr(pair[1]), "nshelper-helper")
	defer mine.Close()
	cmd := o.command()
	cmd.ExtraFiles = append(cmd.ExtraFiles, ns, theirs) // fds 3 and 4, after the binary's
	cmd.Env = []string{fmt.Sprintf("%s=%d,%d", NsRootEnv, 3+len(cmd.ExtraFiles)-2, 3+len(cmd.ExtraFiles)-1)}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("nshelper: start the helper: %w", err)
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(2*4))
	_, oobn, _, _, rerr := unix.Recvmsg(int(mine.Fd()), buf, oob, 0)
	werr := cmd.Wait()
	if rerr != nil {
		return nil, fmt.Errorf("%w: %v (%v)", ErrHelper, rerr, werr)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("%w: no descriptor came back (%v; does the binary's main call launch.Init?)", ErrHelper, werr)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 2 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("%w: %d descriptors came back, want 2 (%v)", ErrHelper, len(fds), err)
	}
	return &View{Root: os.NewFile(uintptr(fds[0]), "/"), Mountinfo: os.NewFile(uintptr(fds[1]), "mountinfo")}, nil
}
