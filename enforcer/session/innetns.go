//go:build linux

package session

import (
	"fmt"
	"os"

	"github.com/klocklabs/klock/internal/netnsdo"
)

// inNetNS runs f on a thread moved into the network namespace at path
// (/proc/<pid>/ns/net), then moved back (netnsdo.Do).
func inNetNS(path string, f func() error) error {
	if err := netnsdo.DoAt(path, f); err != nil {
		return fmt.Errorf("the session's network namespace: %w", err)
	}
	return nil
}

// netNSPath is pid's network namespace.
func netNSPath(pid int) string { return fmt.Sprintf("/proc/%d/ns/net", pid) }

// allowPing lets gid open ICMP echo ("ping") sockets in the network
// namespace at path: net.ipv4.ping_group_range, "1 0" (nobody) in a new
// namespace, is per namespace.
func allowPing(path string, gid uint32) error {
	return inNetNS(path, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", fmt.Appendf(nil, "%d %d", gid, gid), 0)
	})
}
