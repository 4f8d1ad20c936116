package snapshot

import (
	"sync"

	"golang.org/x/sys/unix"
)

// aclKey names one state of an inode: an ACL change moves its ctime.
type aclKey struct {
	dev, ino uint64
	ctime    unix.Timespec
}

// aclCache remembers hasACL's answers. It is bounded: when full it starts
// over (the walks that fill it revisit the same trees, so the next one
// refills it).
type aclCache struct {
	mu  sync.Mutex
	m   map[aclKey]bool
	max int
}

// aclSeen is the process's cache (klockd takes every session's backup).
var aclSeen = &aclCache{max: 1 << 18}

func (c *aclCache) get(k aclKey) (has, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	has, ok = c.m[k]
	return has, ok
}

func (c *aclCache) put(k aclKey, has bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[aclKey]bool)
	}
	c.m[k] = has
}
