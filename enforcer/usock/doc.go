// Package usock owns what klockd's unix sockets share: how a socket is made
// (its directory, the stale-socket check, its mode and group) and who is at
// the other end of a connection, as the kernel says (SO_PEERCRED,
// SO_PEERGROUPS, SO_PEERPIDFD and the peer's cgroup). klockd's session
// socket (enforcer/daemon) and its lease API socket (enforcer/leaseapi) both
// use it, so both identify peers the same way.
//
// It decides nothing: whether a peer may do something is its caller's
// policy (daemon.Server.authorize, leaseapi's tenancy).
//
// # Errors
//
// PeerOf fails closed: a peer whose credentials or cgroup cannot be read
// and verified is an error, never a default identity. Listen refuses to
// replace a live listener's socket or a file that is not a socket.
package usock
