package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// The compensations of REVERSIBLE-WRITE calls must outlive the gateway: a
// session can be killed after the gateway that saw its calls restarted. So
// each one is journaled (one JSON line, fsynced) beside the audit log when
// it is registered, and again when it has been run; Open replays the
// journal and keeps the ones not run. The journal holds the compensation's
// arguments in clear (they are needed to run it), so it is 0600 in the
// gateway's state directory like the idempotency store.

// rbRecord is one journal line.
type rbRecord struct {
	Op       string         `json:"op"` // "add" or "done"
	Run      string         `json:"run"`
	CallID   string         `json:"call_id"`
	Tool     string         `json:"tool,omitempty"`
	Rollback string         `json:"rollback,omitempty"`
	Args     map[string]any `json:"args,omitempty"`
	Problem  string         `json:"problem,omitempty"`
	// Window and Deadline: the contract's rollback.window and, when it
	// names a duration, when it ends (RFC 3339, the gateway's clock).
	Window   string `json:"window,omitempty"`
	Deadline string `json:"deadline,omitempty"`
	At       string `json:"at"`
}

const (
	rbAdd     = "add"
	rbDone    = "done"
	rbExpired = "expired" // past its window: never run, reported as such
)

type rbJournal struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// RollbackJournal is where a gateway whose audit log is auditPath keeps
// its compensations.
func RollbackJournal(auditPath string) string { return auditPath + ".rollbacks" }

// openRBJournal opens (creating) the journal and returns the compensations
// not run yet, by run, in call order. A torn last line (a crash while it
// was written) is ignored: its call's result was not answered either.
func openRBJournal(path string) (*rbJournal, map[string][]pending, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("rollback journal: %w", err)
	}
	open := map[string][]pending{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var r rbRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		switch r.Op {
		case rbAdd:
			p := pending{callID: r.CallID, tool: r.Tool, rollback: r.Rollback, args: r.Args, problem: r.Problem, window: r.Window}
			p.deadline, _ = time.Parse(time.RFC3339Nano, r.Deadline)
			open[r.Run] = append(open[r.Run], p)
		case rbExpired:
			for i := range open[r.Run] {
				if open[r.Run][i].callID == r.CallID {
					open[r.Run][i].expired = true
				}
			}
		case rbDone:
			list := open[r.Run]
			for i, p := range list {
				if p.callID == r.CallID {
					open[r.Run] = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(open[r.Run]) == 0 {
				delete(open, r.Run)
			}
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("rollback journal %s: %w", path, err)
	}
	return &rbJournal{f: f, path: path}, open, nil
}

func (j *rbJournal) append(r rbRecord, now time.Time) error {
	if j == nil {
		return nil
	}
	r.At = now.UTC().Format(time.RFC3339Nano)
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("rollback journal %s: %w", j.path, err)
	}
	return j.f.Sync()
}

func (j *rbJournal) close() error {
	if j == nil {
		return nil
	}
	return j.f.Close()
}
