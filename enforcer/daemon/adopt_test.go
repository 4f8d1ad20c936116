//go:build linux

package daemon

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// TestAdoptRefusesBadRequests: an adopt request that names no container
// or pid, a container id that is a path, or a manifest that does not
// parse is refused with a typed error before anything is adopted; an
// end for a container klockd never adopted says there is no session; a
// non-root peer may not hand klockd a container (it names any process).
func TestAdoptRefusesBadRequests(t *testing.T) {
	s := startServer(t, Config{Group: "nogroup", SocketMode: 0o666})
	cl, err := Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for name, req := range map[string]*AdoptRequest{
		"no container id": {Manifest: []byte("x"), Pid: os.Getpid()},
		"no pid":          {Manifest: []byte("x"), ContainerID: "c1"},
		"id is a path":    {Manifest: []byte("x"), ContainerID: "../c1", Pid: os.Getpid()},
		"bad manifest":    {Manifest: []byte("apiVersion: klock/v1\nagent: [\n"), ManifestPath: "m.yaml", ContainerID: "c1", Pid: os.Getpid()},
	} {
		_, err := cl.Adopt(req)
		var de *Error
		if err == nil || !errors.As(err, &de) {
			t.Errorf("%s: %v, want a typed refusal", name, err)
		} else {
			t.Logf("%s: %s: %s", name, de.Class, de.Message)
		}
	}
	if len(s.Sessions()) != 0 {
		t.Fatalf("sessions after refused adopts: %+v", s.Sessions())
	}
	if _, err := cl.End("never-adopted", time.Second); !errors.Is(err, ErrNoSession) {
		t.Fatalf("end of a container never adopted: %v, want ErrNoSession", err)
	}
	if !s.hasGroup || s.gid != 65534 {
		testutil.Unavailable(t, "this host has no group nogroup with gid 65534 (a non-root peer's way to klockd)")
	}
	member := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534}}}
	if r := helper(t, s.Addr(), "adopt", member); r.OK || r.Class != ClassForbidden {
		t.Fatalf("a klock group member handing klockd a container: %+v, want forbidden", r)
	}
}
