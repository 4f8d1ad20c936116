//go:build linux

package wire

import (
	"fmt"
	"net"
	"time"
)

// AdoptRequest asks klockd to wall a container its runtime created: the
// OCI createRuntime hook (klock oci-hook) sends it while the container's
// init waits. klockd replies "started" once the session holds its leases,
// the backup is taken and the kernel backends are on the container's
// cgroup; the session then outlives the connection and ends when the
// container's init exits. Root only: it names any process.
type AdoptRequest struct {
	Manifest     []byte `json:"manifest"`
	ManifestPath string `json:"manifest_path,omitempty"`
	// Mode is the manifest's enforcement mode override ("" keeps the
	// manifest's; else strict or permissive, as policy.Mode spells it).
	Mode        string `json:"mode,omitempty"`
	ContainerID string `json:"container_id"`
	Pid         int    `json:"pid"`
	// Cgroup is the init's cgroup2 directory ("" reads it from /proc).
	Cgroup string  `json:"cgroup,omitempty"`
	Bundle string  `json:"bundle,omitempty"`
	Mounts []Mount `json:"mounts"`
	// WallFile is the host path of the wall klock-stage2 reads inside the
	// container (klock-runtime's mode); "" for hook-only mode.
	WallFile string   `json:"wall_file,omitempty"`
	UID      uint32   `json:"uid"`
	GID      uint32   `json:"gid"`
	Groups   []uint32 `json:"groups,omitempty"`
	// Cwd is the entrypoint's working directory in the container.
	Cwd           string `json:"cwd,omitempty"`
	AllowDegraded bool   `json:"allow_degraded,omitempty"`
	Backend       string `json:"backend,omitempty"`
}

// Mount maps a path in a container to the host path it shows (the spec's
// bind mounts), as the verification log records it (vlog.Mount has the
// same JSON).
type Mount struct {
	Container string `json:"container"`
	Host      string `json:"host"`
}

// EndRequest waits for a container's session to end (the OCI poststop
// hook) and returns its result.
type EndRequest struct {
	ContainerID string        `json:"container_id"`
	Wait        time.Duration `json:"wait"`
}

// requestSlack is how long past its own work a request waits for klockd's
// reply.
const requestSlack = 30 * time.Second

// Adopt sends req on c and returns once the container's session runs
// (an *Error when klockd refused it). wait bounds the whole exchange: the
// backup of a large workdir takes its time. c is closed.
func Adopt(c *net.UnixConn, req *AdoptRequest, wait time.Duration) (*SessionInfo, error) {
	r, err := roundTrip(c, &Message{Type: TypeAdopt, Adopt: req}, wait)
	if err != nil {
		return nil, err
	}
	if r.Type != TypeStarted || r.Session == nil {
		return nil, fmt.Errorf("%w: reply %q to adopt", ErrProtocol, r.Type)
	}
	return r.Session, nil
}

// End waits up to wait for container id's session to end and returns its
// result (an *Error of ClassNoSession when klockd adopted no such
// container). c is closed.
func End(c *net.UnixConn, id string, wait time.Duration) (*Result, error) {
	r, err := roundTrip(c, &Message{Type: TypeEnd, End: &EndRequest{ContainerID: id, Wait: wait}}, wait+requestSlack)
	if err != nil {
		return nil, err
	}
	if r.Type != TypeResult || r.Result == nil {
		return nil, fmt.Errorf("%w: reply %q to end", ErrProtocol, r.Type)
	}
	return r.Result, nil
}

// roundTrip sends m on c and reads one reply, within d; a refusal is
// returned as its *Error. c is closed.
func roundTrip(c *net.UnixConn, m *Message, d time.Duration) (*Message, error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	m.V = ProtocolVersion
	if err := WriteFrame(c, m); err != nil {
		return nil, Refusal(c, fmt.Errorf("klockd: send: %w", err))
	}
	var r Message
	fs, err := ReadFrame(c, MaxReplyFrame, &r)
	CloseAll(fs)
	if err != nil {
		return nil, fmt.Errorf("klockd: no reply: %w", err)
	}
	if r.Type == TypeError && r.Error != nil {
		return nil, r.Error
	}
	return &r, nil
}
