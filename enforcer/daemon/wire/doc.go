// Package wire is klockd's protocol: the frames on its unix socket, the
// messages they carry, and the client end of a connection (Dial, a
// streamed run).
//
// It is the part of klockd a client links. It imports no policy, session
// or BPF package, so a client built on it (the `klock run` front, the OCI
// hook) starts in the time of a small program: no cel-go, protobuf, SQLite
// or cilium/ebpf initialisation on its path. enforcer/daemon builds the
// server and its full client on top of it.
//
// # Frames
//
// A frame is a 4-byte big-endian length and a JSON body. File descriptors
// (the agent's stdio) ride on a frame's first byte as SCM_RIGHTS and are
// received close-on-exec. A request carries ProtocolVersion; klockd
// refuses another version rather than guess.
//
// # Errors
//
// Dial fails with ErrNoDaemon when nothing listens on the socket and with
// ErrForbidden when the socket's permissions keep the caller out. A frame
// that cannot be read or decoded is ErrProtocol. A refusal klockd sends is
// an *Error: Class is machine-readable, Message names what is wrong and
// what would fix it (enforcer/daemon maps classes to the sentinels of the
// packages that raised them).
package wire
