//go:build linux

package looprelay

import (
	"net"
	"sync/atomic"
)

// pipe copies from src to dst, counting every read, then half-closes dst.
// (A kernel splice between the two connections measured no faster here,
// and would count in chunks: the egress budget wants every byte counted
// as it goes.)
func pipe(dst, src net.Conn, packets, bytes *atomic.Uint64) {
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			packets.Add(1)
			bytes.Add(uint64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}
