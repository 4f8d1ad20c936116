package snapshot

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrCollected: the session's backup existed and GC removed it. It wraps
// ErrNotFound, so a caller that only asks "is there a backup" still gets
// no; one that asks why learns it was collected.
var ErrCollected = fmt.Errorf("%w: collected by klock backups gc", ErrNotFound)

// collectedFile lists the sessions GC removed, one JSON line each, so a
// later Open can say the backup was collected rather than that a file is
// missing. It is a file, not a directory: List never takes it for a session.
const collectedFile = "collected.jsonl"

// collectedRecord is one line of collectedFile.
type collectedRecord struct {
	Session string    `json:"session"`
	At      time.Time `json:"at"`
	Keep    int       `json:"keep"`
}

// recordCollected appends the sessions GC is about to remove, synced, so
// the record is there before the backups are gone.
func recordCollected(root string, sessions []string, keep int, at time.Time) error {
	if len(sessions) == 0 {
		return nil
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, s := range sessions {
		_ = enc.Encode(collectedRecord{Session: s, At: at.UTC(), Keep: keep})
	}
	p := filepath.Join(root, collectedFile)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return pathErr("record collected sessions in", p, err, root)
	}
	_, err = f.WriteString(b.String())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return pathErr("record collected sessions in", p, err, root)
}

// findCollected returns GC's record of session, if it removed it.
func findCollected(root, session string) (collectedRecord, bool) {
	f, err := os.Open(filepath.Join(root, collectedFile))
	if err != nil {
		return collectedRecord{}, false
	}
	defer f.Close()
	var found collectedRecord
	ok := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r collectedRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Session == session {
			found, ok = r, true // the last record wins
		}
	}
	return found, ok
}

// missing is Open's error for a session with no backup under root: why
// there is none, when GC says, and what the user can still do.
func missing(root, session string, err error) error {
	dir := filepath.Join(root, session)
	if r, ok := findCollected(root, session); ok {
		return &Error{Op: "open the backup of session " + session + " in", Path: root, Kind: ErrCollected,
			Hint: fmt.Sprintf("`klock backups gc` deleted it on %s, keeping the newest %d; nothing of it is left to restore. "+
				"`klock log -m MANIFEST %s` still lists what its agent changed: restore those paths from version control or your own backups; "+
				"keep more sessions with `klock backups gc --keep N`", r.At.Format("2006-01-02 15:04:05 UTC"), r.Keep, session)}
	}
	if errors.Is(err, os.ErrNotExist) {
		err = nil // the message says it; the raw manifest.json path adds nothing
	}
	return &Error{Op: "open the backup of session " + session + " in", Path: root, Kind: ErrNotFound, Err: err,
		Hint: fmt.Sprintf("%s is missing: the session never took a backup here (it did not start, or its workdir differs: check -m or --dir), "+
			"or it was deleted by hand; `klock backups ls` lists the sessions that have one", dir)}
}
