//go:build linux

package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Frame size limits: a request carries a manifest, a reply a whole
// verification log.
const (
	MaxRequestFrame = 16 << 20
	MaxReplyFrame   = 256 << 20
)

// WriteFrame sends one frame whose body is v's JSON. files, when any,
// ride on the frame's first byte as SCM_RIGHTS.
func WriteFrame(c *net.UnixConn, v any, files ...*os.File) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		n, oobn, err := c.WriteMsgUnix(buf, unix.UnixRights(fds...), nil)
		if err != nil {
			return err
		}
		if oobn == 0 {
			return errors.New("klockd: file descriptors were not sent")
		}
		buf = buf[n:]
		if len(buf) == 0 {
			return nil
		}
	}
	_, err = c.Write(buf)
	return err
}

// ReadFrame reads one frame of at most limit bytes into v and returns the
// descriptors that came with it (the caller closes them). Descriptors are
// received close-on-exec.
func ReadFrame(c *net.UnixConn, limit int, v any) ([]*os.File, error) {
	r := frameReader{c: c}
	var hdr [4]byte
	if err := r.readFull(hdr[:]); err != nil {
		return r.fail(err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(limit) {
		return r.fail(fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrProtocol, n, limit))
	}
	body := make([]byte, n)
	if err := r.readFull(body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return r.fail(err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return r.fail(fmt.Errorf("%w: %v", ErrProtocol, err))
	}
	return r.files, nil
}

// frameReader reads a frame's bytes and keeps the descriptors that come
// along.
type frameReader struct {
	c     *net.UnixConn
	files []*os.File
}

func (r *frameReader) fail(err error) ([]*os.File, error) {
	CloseAll(r.files)
	return nil, err
}

func (r *frameReader) readFull(b []byte) error {
	oob := make([]byte, unix.CmsgSpace(4*8))
	for len(b) > 0 {
		n, oobn, _, _, err := r.c.ReadMsgUnix(b, oob)
		n, oobn = max(n, 0), max(oobn, 0)
		if oobn > 0 {
			r.files = append(r.files, parseRights(oob[:oobn])...)
		}
		b = b[n:]
		if err != nil {
			if err == io.EOF && len(b) > 0 && n == 0 {
				return io.EOF
			}
			return err
		}
		if n == 0 && len(b) > 0 {
			return io.ErrUnexpectedEOF
		}
	}
	return nil
}

func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("client-fd-%d", fd)))
		}
	}
	return files
}

// CloseAll closes every non-nil file of files.
func CloseAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
