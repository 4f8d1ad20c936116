package session

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// NewID returns a session id: sortable by time, unique by a random suffix,
// and valid as a cgroup and directory name.
func NewID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}
