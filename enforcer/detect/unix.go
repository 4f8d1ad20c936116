//go:build linux

package detect

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/klocklabs/klock/enforcer/cgroup"
)

var unixHooks struct {
	once sync.Once
	err  error
}

// UnixHooks reports whether this kernel has the cgroup AF_UNIX address
// hooks (cgroup/connect_unix and cgroup/sendmsg_unix, Linux 6.7+) that
// enforcer/unixguard attaches: it loads a trivial program of each attach
// type and attaches it to a scratch cgroup. It asks the kernel, never its
// version (a kernel without them refuses the attach type at load). The
// answer is cached for the life of the process.
func UnixHooks() error {
	unixHooks.once.Do(func() { unixHooks.err = probeUnixHooks() })
	return unixHooks.err
}

func probeUnixHooks() (err error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("remove memlock limit: %w", err)
	}
	cg, err := cgroup.Create(fmt.Sprintf("doctor-unix-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("scratch cgroup: %w", err)
	}
	defer func() {
		if derr := cg.Delete(); err == nil && derr != nil {
			err = fmt.Errorf("remove scratch cgroup: %w", derr)
		}
	}()
	for _, a := range []struct {
		name string
		typ  ebpf.AttachType
	}{{"cgroup/connect_unix", ebpf.AttachCgroupUnixConnect}, {"cgroup/sendmsg_unix", ebpf.AttachCgroupUnixSendmsg}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type: ebpf.CGroupSockAddr, AttachType: a.typ, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}, // allow
		})
		if err != nil {
			return fmt.Errorf("load %s: %w", a.name, err)
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg.Path, Attach: a.typ, Program: prog})
		prog.Close()
		if err != nil {
			return fmt.Errorf("attach %s: %w", a.name, err)
		}
		if err := l.Close(); err != nil {
			return fmt.Errorf("detach %s: %w", a.name, err)
		}
	}
	return nil
}

// UnixSockets says what stops a connect or a datagram (sendto, sendmsg,
// sendmmsg) to a pathname AF_UNIX socket the manifest does not declare,
// backend by backend, and what klock run gets here: bpf-lsm decides them
// where it runs (lsmOK); with the Landlock wall, which has no right for
// them, the cgroup AF_UNIX hooks do when the kernel has them (UnixHooks);
// else the tracepoints detect them after the effect. It never fails strict
// mode: detection is that host's guarantee for them.
func UnixSockets(lsmOK bool) Check {
	c := Check{Name: "unix-sockets", OK: true, Used: true}
	if !needRoot(&c) {
		c.OK, c.Used = false, false
		return c
	}
	hooks := UnixHooks()
	var per []string
	if lsmOK {
		per = append(per, "bpf-lsm blocks before the effect (unix_stream_connect, unix_may_send, socket_connect)")
	} else {
		per = append(per, "bpf-lsm unavailable")
	}
	per = append(per, "Landlock cannot wall them")
	if hooks == nil {
		per = append(per, "cgroup/connect_unix + sendmsg_unix block before the effect, by the socket's path (with the Landlock wall)")
	} else {
		per = append(per, "cgroup AF_UNIX hooks unavailable ("+unwrapAll(hooks)+")")
	}
	per = append(per, "tracepoints detect them after the effect (strict: kill, rollback)")
	c.Detail = "pathname AF_UNIX sockets (connect, sendto/sendmsg/sendmmsg): " + strings.Join(per, "; ")
	switch {
	case lsmOK:
		c.Guarantee, c.Detail = Blocks, c.Detail+". klock run: bpf-lsm"
	case hooks == nil:
		c.Guarantee, c.Detail = Blocks, c.Detail+". klock run: the cgroup AF_UNIX hooks"
	default:
		c.Guarantee, c.Detail = Detects, c.Detail+". klock run: detected only (the listener hears a connect or datagram before the kill)"
		c.Fix = "a kernel with the cgroup AF_UNIX hooks (Linux 6.7+) or with bpf in lsm= blocks them before the effect"
	}
	return c
}

// unwrapAll is err's text; cilium/ebpf's load errors are long, the first
// line says it.
func unwrapAll(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		s += " (verifier)"
	}
	return s
}
