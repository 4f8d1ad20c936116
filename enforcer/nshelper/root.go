//go:build linux

package nshelper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NsRootEnv marks the helper process: "NSFD,SOCKFD".
const NsRootEnv = "_KLOCK_NSROOT"

// ErrHelper: the helper process failed.
var ErrHelper = errors.New("nshelper: the helper process failed")

// Init is the helpers' entry point: in a process started by OpenRoot or
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
	if err := unix.Sendmsg(sockfd, []byte{1}, unix.UnixRights(fd), nil, 0); err != nil {
		os.Exit(6)
	}
	os.Exit(0)
}

// OpenRoot returns the root directory of the mount namespace ns (an open
// /proc/<pid>/ns/mnt), as an O_PATH descriptor.
func OpenRoot(ns *os.File) (*os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nshelper: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(pair[0]), "nshelper")
	theirs := os.NewFile(uintptr(pair[1]), "nshelper-helper")
	defer mine.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.ExtraFiles = []*os.File{ns, theirs} // fds 3 and 4
	cmd.Env = []string{NsRootEnv + "=3,4"}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("nshelper: start the helper: %w", err)
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
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
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("%w: %v", ErrHelper, err)
	}
	return os.NewFile(uintptr(fds[0]), "/"), nil
}
