//go:build linux

package daemon

import "github.com/klocklabs/klock/enforcer/usock"

// Peer is who is at the other end of a connection, as the kernel says (see
// usock.PeerOf, which klockd's lease API socket shares).
type Peer = usock.Peer
