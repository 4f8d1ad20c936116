//go:build linux

package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/klocklabs/klock/enforcer/vlog"
)

// DefaultNoticeDir is where one session tells another that its agent
// changed a file the other held a lease on, and what its rollback put
// back (KLIS leases hold inodes: a hard link, rename or write that reached
// the file by another name is such a change). The holder reads its notices
// when it ends, into its verification log (vlog.Log.Intrusions). Every
// klock process of the host (klock run, klockd, klock-runtime's sessions)
// runs as root and shares it, as it shares /run/klock/leases.
const DefaultNoticeDir = "/run/klock/notices"

// isSessionName says whether a holder's session id may name a directory
// (ids come from the lease store, which API clients write): 1 to 128 of
// [A-Za-z0-9._-], not starting with '.', '_' or '-'. A loop, not a
// regexp: `{0,127}` compiled at every klock process's start was a third
// of a millisecond.
func isSessionName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// postNotices leaves ns for the session holder, from session from: one
// file written whole (temp, fsync, rename), so a reader never sees half.
func postNotices(dir, holder, from string, ns []vlog.Intrusion) error {
	if len(ns) == 0 {
		return nil
	}
	if !isSessionName(holder) || !isSessionName(from) {
		return fmt.Errorf("notice for session %q from %q: not a session id", holder, from)
	}
	d := filepath.Join(dir, holder)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("notice for session %s: %w", holder, err)
	}
	b, err := json.Marshal(ns)
	if err != nil {
		return err
	}
	name := filepath.Join(d, from+"-"+strconv.FormatInt(time.Now().UnixNano(), 10)+".json")
	tmp, err := os.CreateTemp(d, ".tmp-*")
	if err != nil {
		return fmt.Errorf("notice for session %s: %w", holder, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("notice for session %s: %w", holder, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("notice for session %s: %w", holder, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

// takeNotices returns (and removes) every notice left for session, oldest
// first. A notice that does not parse is returned as one intrusion saying
// so, never dropped silently.
func takeNotices(dir, session string) []vlog.Intrusion {
	if dir == "" || !isSessionName(session) {
		return nil
	}
	d := filepath.Join(dir, session)
	ents, err := os.ReadDir(d)
	if err != nil {
		return nil
	}
	var out []vlog.Intrusion
	for _, e := range ents {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		p := filepath.Join(d, e.Name())
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var ns []vlog.Intrusion
		if err == nil {
			err = json.Unmarshal(b, &ns)
		}
		if err != nil {
			out = append(out, vlog.Intrusion{Time: time.Now(), Path: p, PutBack: "unknown", Error: "a notice from another session could not be read: " + err.Error()})
			continue
		}
		out = append(out, ns...)
		os.Remove(p)
	}
	os.Remove(d) // empty now, unless another notice just landed
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}
