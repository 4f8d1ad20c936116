//go:build linux

package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Action is what Restore did to one path.
type Action string

// The actions a Report lists.
const (
	Unchanged Action = "unchanged" // already in its recorded state: not written
	Restored  Action = "restored"  // existed but differed: content and/or metadata put back
	Recreated Action = "recreated" // was missing: made again from the backup
	Removed   Action = "removed"   // did not exist at Take (the session created it): removed
	// Spared: another process's, left in place (SpareOthersNew): made
	// since Take and not owned by the agent's uid, or changed but owned by
	// another user and writable by nobody else.
	Spared Action = "spared"
	// Left: in a region Leave names (another holder's lease covers it),
	// and it differs from the backup: left as it is (ReportEntry.Why says
	// whose it is).
	Left Action = "left"
	// MovedBack: a file that existed before the session was found under
	// another name (ReportEntry.Why says which) and renamed back to its
	// recorded name, whatever region that lies in; then put back like
	// any other recorded path (its content, in place, if it differs).
	MovedBack Action = "moved back"
)

// ReportEntry is one path of a Report.
type ReportEntry struct {
	Path   string `json:"path"`
	Action Action `json:"action"`
	Error  string `json:"error,omitempty"`
	// Why, for Left: the region's (whose lease covers the path); for
	// MovedBack: "found at <the name it had>"; for a reclaimed path (see
	// Reclaim): what was done to another session's file; for a file kept
	// because it existed before the session: that.
	Why string `json:"why,omitempty"`
	// Holder, for a reclaimed path or one moved back into a region
	// Restore otherwise leaves: that region's Why (it names the session
	// holding it), so the caller can tell that session.
	Holder string `json:"holder,omitempty"`
}

// Report lists every recorded path (and every removed one) with what
// Restore did; anchors appear only when their times were put back.
type Report struct {
	Session string        `json:"session"`
	Resumed bool          `json:"resumed"` // an interrupted restore was finished
	Entries []ReportEntry `json:"entries"`
	// Duration of this call.
	Duration time.Duration `json:"duration"`
}

// Changed is every entry whose action is not Unchanged, or that failed.
func (r Report) Changed() []ReportEntry {
	var out []ReportEntry
	for _, e := range r.Entries {
		if e.Action != Unchanged || e.Error != "" {
			out = append(out, e)
		}
	}
	return out
}

// Count is how many entries have action a.
func (r Report) Count(a Action) int {
	n := 0
	for _, e := range r.Entries {
		if e.Action == a {
			n++
		}
	}
	return n
}

// Failed is every entry with an error.
func (r Report) Failed() []ReportEntry {
	var out []ReportEntry
	for _, e := range r.Entries {
		if e.Error != "" {
			out = append(out, e)
		}
	}
	return out
}

// jrec is one journal line.
type jrec struct {
	Op     string `json:"op"` // begin | tmp | do | end
	Path   string `json:"path,omitempty"`
	Action Action `json:"action,omitempty"`
	// Only, on begin: the restore was limited to these roots (Limited
	// tells an empty limit from none), so a resumed run keeps the limit.
	Only    []Scope `json:"only,omitempty"`
	Limited bool    `json:"limited,omitempty"`
	// Spare, on begin: SpareOthersNew, kept by a resumed run.
	Spare bool `json:"spare,omitempty"`
	// Leave, on begin: Leave's regions, kept by a resumed run.
	Leave []Region `json:"leave,omitempty"`
	// Reclaim, on begin: Reclaim's paths, kept by a resumed run.
	Reclaim []string `json:"reclaim,omitempty"`
	// ReclaimName, on begin: ReclaimName's paths, kept by a resumed run.
	ReclaimName []string `json:"reclaim_name,omitempty"`
	// From, on a MovedBack "do" (and "park"): the name the file had.
	From string `json:"from,omitempty"`
}

type journal struct {
	f    *os.File
	buf  bytes.Buffer
	path string
}

// readJournal reads a journal's whole records (none when there is no
// journal) and the length they take; a torn last line is not one of them.
func readJournal(p string) (recs []jrec, valid int, err error) {
	data, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, 0, err
	}
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break
		}
		var r jrec
		if json.Unmarshal(data[off:off+nl], &r) != nil {
			break
		}
		recs = append(recs, r)
		off += nl + 1
		valid = off
	}
	return recs, valid, nil
}

// openJournal reads the journal of an unfinished restore (one whose last
// record is not "end"), drops a torn last line, and opens it for appending.
func openJournal(p string) (*journal, []jrec, error) {
	recs, valid, err := readJournal(p)
	if err != nil {
		return nil, nil, err
	}
	flag := os.O_RDWR | os.O_CREATE
	if len(recs) == 0 || recs[len(recs)-1].Op == "end" {
		recs, valid = nil, 0
	}
	f, err := os.OpenFile(p, flag, 0o600)
	if err != nil {
		return nil, nil, err
	}
	if err := f.Truncate(int64(valid)); err != nil {
		f.Close()
		return nil, nil, err
	}
	if _, err := f.Seek(int64(valid), 0); err != nil {
		f.Close()
		return nil, nil, err
	}
	return &journal{f: f, path: p}, recs, nil
}

func (j *journal) add(r jrec) {
	b, _ := json.Marshal(r)
	j.buf.Write(b)
	j.buf.WriteByte('\n')
}

// flush writes the buffered records and makes them durable.
func (j *journal) flush() error {
	if j.buf.Len() == 0 {
		return nil
	}
	hook("journal", j.path)
	if _, err := j.f.Write(j.buf.Bytes()); err != nil {
		return err
	}
	j.buf.Reset()
	return j.f.Sync()
}

// Restore brings every recorded path back to its recorded state and removes
// every path in the recorded scopes that did not exist at Take. It is
// idempotent and resumable: it journals its intent in <root>/<session>/journal
// before acting, so running it again after it was killed at any point
// finishes the job and converges to the same tree. Per-path failures do not
// stop it; they are listed in the Report and the error wraps ErrIncomplete.
func (s *Snapshot) Restore(ctx context.Context, opts ...RestoreOption) (Report, error) {
	start := time.Now()
	rep := Report{Session: s.Session()}
	unlock, err := lockDir(s.root)
	if err != nil {
		return rep, pathErr("lock", s.root, err, s.root)
	}
	defer unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := &restorer{ctx: ctx, s: s, m: s.m, act: map[string]*ReportEntry{}, madeDir: map[string]bool{}, noPlace: map[fileID]bool{}, vacated: map[int]bool{}, start: s.m.takeStart().UnixNano()}
	for _, o := range opts {
		o(&r.lim)
	}
	err = r.run(&rep)
	rep.Duration = time.Since(start)
	return rep, err
}

type restorer struct {
	lim   limit
	ctx   context.Context
	s     *Snapshot
	m     *Manifest
	j     *journal
	byIdx map[string]int
	cur   []*unix.Stat_t
	act   map[string]*ReportEntry
	order []string
	first error
	// jmu: the journal, from makeTemp's workers.
	jmu sync.Mutex
	// madeDir: directories this run made again (their metadata is put
	// back whoever owned them).
	madeDir map[string]bool
	// ids: every recorded inode's entries (indexInodes); noPlace: those
	// whose move back failed (not tried again in this run).
	ids     map[fileID][]int
	noPlace map[fileID]bool
	// vacated: recorded paths whose occupant (another recorded file)
	// was moved back to its own name: put back, they were replaced.
	vacated map[int]bool
	// start: when Take began (ns): an unrecorded file born before it
	// existed before the session.
	start int64
}

func (r *restorer) set(p string, a Action) {
	if e, ok := r.act[p]; ok {
		// Recreated, Removed and MovedBack say more than Restored, which
		// says more than Unchanged.
		if a != Unchanged && e.Action != Recreated && e.Action != Removed && e.Action != MovedBack {
			e.Action = a
		}
		return
	}
	r.act[p] = &ReportEntry{Path: p, Action: a}
	r.order = append(r.order, p)
}

// leave reports p Left for region g (nothing is done to it).
func (r *restorer) leave(p string, g Region) {
	r.set(p, Left)
	if e := r.act[p]; e.Action == Left {
		e.Why = g.Why
	}
}

// changedSince says whether the path recorded as e is no longer what Take
// saw (st nil: it is missing).
func changedSince(e *Entry, st *unix.Stat_t) bool {
	return st == nil || st.Dev != e.Dev || st.Ino != e.Ino || tsNano(st.Ctim) != e.Ctime || typeOf(st.Mode) != e.Type
}

func (r *restorer) fail(p string, a Action, err error) {
	r.set(p, a)
	r.act[p].Error = err.Error()
	if r.first == nil {
		r.first = pathErr("restore", p, err, p)
	}
}

// notTheAgents says whether SpareOthersNew leaves a recorded path that
// changed: still the recorded inode (not replaced), owned by another user
// than the agent's and writable by nobody else. An agent without
// capabilities could neither write it nor change its metadata, so what
// changed it was another process (klock rollback of a session whose log
// is missing puts back everything else). Directories and hard-link groups
// are restored as usual.
func (r *restorer) notTheAgents(e *Entry, st *unix.Stat_t) bool {
	uid := r.m.AgentUID
	// Root writes any file whoever owns it (a root container's agent in
	// hook-only mode, klock run --user 0): nothing tells its change from
	// another process's, so nothing is spared.
	return r.lim.spare && uid != nil && *uid != 0 && st != nil && e.Type != TypeDir && e.Nlink <= 1 &&
		st.Dev == e.Dev && st.Ino == e.Ino && tsNano(st.Ctim) != e.Ctime &&
		st.Uid != *uid && st.Mode&0o022 == 0
}

// ownsMeta says whether the agent could set e's metadata (mode, owner,
// times) itself: it owned it, or the agent is unknown.
func (r *restorer) ownsMeta(e *Entry) bool {
	return r.m.AgentUID == nil || e.UID == *r.m.AgentUID
}

func (r *restorer) tmpName(p string, i int) string {
	return filepath.Join(filepath.Dir(p), ".klock-rst-"+r.m.Session+"-"+strconv.Itoa(i))
}

type job struct {
	i      int
	tmp    string
	action Action
	ino    uint64
	ok     bool
	// inPlace: the recorded inode gets its content back itself (tmp is
	// unused unless that fails, see makeTemp).
	inPlace bool
}

// run is Restore's sequence (package doc, "Guarantees"): every intent is
// journalled and fsynced before the change it names, so a run killed at
// any point is finished by the next. The order of the phases is that
// order; each phase is one method below.
func (r *restorer) run(rep *Report) error {
	prev, err := r.openSessionJournal()
	if err != nil {
		return err
	}
	defer r.j.f.Close()
	rep.Resumed = len(prev) > 0
	was, err := r.resume(prev)
	if err != nil {
		return err
	}
	r.settleLimit()
	if err := r.journalBegin(); err != nil {
		return err
	}
	// Other sessions' trees are left whatever the options (All too: they
	// were never this session's), except what Reclaim names.
	r.lim.leave = append(r.lim.leave, othersRegions(r.m)...)

	sr, err := r.scanUntilSettled()
	if err != nil {
		return err
	}
	replaced, err := r.removeUnrecorded(sr)
	if err != nil {
		return err
	}
	pl, err := r.makePlan(sr, replaced)
	if err != nil {
		return err
	}
	if err := r.journalJobs(pl.jobs); err != nil {
		return err
	}
	errs := r.makeTemps(pl)
	if err := r.ctx.Err(); err != nil {
		return err
	}
	r.dropFailedTemps(pl, errs)
	r.commitTemps(pl.jobs)
	r.setBlockingFlags(pl.jobs)
	r.fixMetaInPlace(pl.metaFix)
	r.restoreMeta()
	r.fixDirs()
	if err := r.syncAll(); err != nil {
		return err
	}
	r.mergeResumed(was)
	r.reportReclaimed()
	// What this restore left, before "end": a later rollback's check for
	// changes since its session counts these as klock's, not as news.
	if err := r.recordPuts(); err != nil {
		return err
	}
	return r.finish(rep)
}

// openSessionJournal opens the session's journal (package doc, "On disk") for
// this run, and returns what an interrupted run recorded in it.
func (r *restorer) openSessionJournal() ([]jrec, error) {
	p := filepath.Join(filepath.Join(r.s.root, r.m.Session), journalFile)
	j, prev, err := openJournal(p)
	if err != nil {
		return nil, pathErr("open journal", p, err, r.s.root)
	}
	r.j = j
	return prev, nil
}

// resumed is what an interrupted run journalled that it did, merged into
// this run's report (package doc: "the Report then merges what the
// killed run did").
type resumed struct {
	act  map[string]Action // path -> its "do" action
	from map[string]string // path -> the name a MovedBack file had
}

// resume reads an interrupted run's journal: its temps are removed (the
// package doc: "running Restore again removes the journalled temps"), its
// actions kept for the report, and its limits (begin) kept, so that the
// run that finishes it restores what it would have.
func (r *restorer) resume(prev []jrec) (resumed, error) {
	was := resumed{act: map[string]Action{}, from: map[string]string{}}
	for _, rec := range prev {
		switch rec.Op {
		case "tmp": // a killed run's temp file: never a recorded path
			if err := removeStaleTemp(rec.Path); err != nil {
				return was, err
			}
		case "do":
			if was.act[rec.Path] != MovedBack { // says more than what followed
				was.act[rec.Path] = rec.Action
			}
			if rec.From != "" {
				was.from[rec.Path] = rec.From
			}
		case "begin":
			// Finishing an interrupted limited restore without a limit
			// of its own keeps the interrupted run's (klock rollback
			// after a crash must not revert what others changed).
			if rec.Limited && !r.lim.on && !r.lim.all {
				Only(rec.Only...)(&r.lim)
			}
			if rec.Spare && !r.lim.all {
				r.lim.spare = true
			}
			if !r.lim.all {
				Leave(rec.Leave...)(&r.lim)
			}
			Reclaim(rec.Reclaim...)(&r.lim)
			ReclaimName(rec.ReclaimName...)(&r.lim)
		}
	}
	return was, nil
}

// removeStaleTemp removes a temp file a killed run journalled (a
// directory there is not one: temps are files).
func removeStaleTemp(p string) error {
	if st, _ := lstat(p); st != nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		hook("remove", p)
		if err := unix.Unlink(p); err != nil && err != unix.ENOENT {
			return pathErr("remove temp file", p, err, p)
		}
	}
	return nil
}

// settleLimit completes the limit once the options and a resumed run's
// are known: Reclaim's paths are in it (doc.go: "they are put back
// anyway"), hard-link groups are whole, All spares nothing and checks no
// roots.
func (r *restorer) settleLimit() {
	if r.lim.on {
		// A reclaimed path is put back, wherever the limit's roots are.
		for _, p := range r.lim.reclaimed {
			if !r.lim.covers(p) {
				r.lim.add(Scope{Path: p})
			}
		}
	}
	r.lim.withLinkGroups(r.m.Entries)
	if r.lim.all {
		r.lim.spare = false
	}
	if r.lim.all || !r.lim.on {
		r.lim.unrecorded = false // no roots: nothing named to check
	}
}

// journalBegin journals the run's limits, durably, before it acts, so a
// resumed run keeps them (jrec's begin fields).
func (r *restorer) journalBegin() error {
	r.j.add(jrec{Op: "begin", Only: r.lim.roots, Limited: r.lim.on, Spare: r.lim.spare, Leave: r.lim.leave, Reclaim: r.lim.reclaimed, ReclaimName: r.lim.namesOnly})
	return r.flushJournal()
}

// flushJournal makes the journalled intents durable (doc.go: "It
// journals its intent (temp names, moves back and per-path actions,
// fsynced) before acting").
func (r *restorer) flushJournal() error {
	if err := r.j.flush(); err != nil {
		return pathErr("write journal", r.j.path, err, r.s.root)
	}
	return nil
}

// scanUntilSettled is the scan phase: what exists now, what must go. A
// recorded inode found under a name not its own is put back first
// (moveback_linux.go), and the scopes walked again, until nothing more
// moves (doc.go: "the scopes are walked again until nothing more moves").
func (r *restorer) scanUntilSettled() (*scanResult, error) {
	r.byIdx = make(map[string]int, len(r.m.Entries))
	for i := range r.m.Entries {
		r.byIdx[r.m.Entries[i].Path] = i
	}
	r.indexInodes()
	if r.lim.unrecorded {
		r.reportUnrecorded()
	}
	var sr *scanResult
	var err error
	for round := 0; ; round++ {
		if sr, err = r.scan(); err != nil {
			return nil, err
		}
		if err := r.ctx.Err(); err != nil {
			return nil, err
		}
		if round >= maxRounds || !r.placeHome(sr) {
			break
		}
	}
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	for _, f := range sr.reports {
		f()
	}
	r.settle(sr)
	r.cur = sr.cur
	return sr, nil
}

// removeUnrecorded journals, then removes, what the scan found must go
// (doc.go: Restore "removes paths that are in a scope but not recorded
// (and recorded paths whose type changed)"). It returns which recorded
// entries it so removed (replaced: put back as Restored, not Recreated).
func (r *restorer) removeUnrecorded(sr *scanResult) ([]bool, error) {
	for _, rm := range sr.removals {
		if rm.idx < 0 && sr.protect[rm.p] == "" {
			r.j.add(jrec{Op: "do", Path: rm.p, Action: Removed})
		}
	}
	if err := r.flushJournal(); err != nil {
		return nil, err
	}
	replaced := make([]bool, len(r.m.Entries))
	for _, rm := range sr.removals {
		if err := r.removeTree(rm.p, sr); err != nil {
			r.fail(rm.p, Removed, err)
			continue
		}
		if sr.protect[rm.p] != "" || sr.holds[rm.p] {
			continue // kept, or what it holds is: reported
		}
		if rm.idx < 0 {
			r.set(rm.p, Removed)
		} else {
			replaced[rm.idx] = true
		}
	}
	return replaced, nil
}

// plan is what the plan phase decided: the temps to make (leaders first,
// hard-link members after: a member's temp links to its leader's final
// inode), and the paths whose content is right but metadata may not be.
type plan struct {
	jobs  []*job
	nLead int    // jobs[:nLead] are not hard-link members
	jobOf []*job // entry -> its (non-member) job
	// leaderIno: entry -> the inode that holds its content once done
	// (hard-link members are checked against it).
	leaderIno []uint64
	metaFix   []int
	// replaced: entries whose path removeUnrecorded cleared; vacated:
	// r.vacated. Both make a missing path Restored, not Recreated.
	replaced []bool
	vacated  map[int]bool
}

// missing is the action for entry i that is not at its name.
func (pl *plan) missing(i int) Action {
	if pl.replaced[i] || pl.vacated[i] {
		return Restored
	}
	return Recreated
}

// action is the action for entry i, with st what is at its name now.
func (pl *plan) action(i int, st *unix.Stat_t) Action {
	if st == nil {
		return pl.missing(i)
	}
	return Restored
}

// add plans a temp for entry jb.i.
func (pl *plan) add(jb *job) {
	pl.jobs, pl.jobOf[jb.i] = append(pl.jobs, jb), jb
}

// makePlan is the plan phase: it decides per entry (unchanged, metadata only,
// a temp to make) and creates missing directories top-down (doc.go:
// "creates missing directories top-down"), then hard-link members.
func (r *restorer) makePlan(sr *scanResult, replaced []bool) (*plan, error) {
	n := len(r.m.Entries)
	pl := &plan{jobOf: make([]*job, n), leaderIno: make([]uint64, n), replaced: replaced, vacated: r.vacated}
	var members []int
	for i := range r.m.Entries {
		e := &r.m.Entries[i]
		if e.Anchor || e.Fixed || e.Meta || !r.lim.covers(e.Path) {
			continue // anchors and directories above the limit: times only, below; Fixed: never; Meta: restoreMeta
		}
		if g, isLeft := r.leftAt(e.Path); isLeft {
			if changedSince(e, r.cur[i]) {
				r.leave(e.Path, g)
			}
			continue
		}
		if st := r.cur[i]; r.lim.nameOnly[e.Path] && st != nil && st.Dev == e.Dev && st.Ino == e.Ino {
			// Its inode is at its name again (moved back, or never
			// moved): what it holds is the holder's (ReclaimName).
			pl.leaderIno[i] = st.Ino
			continue
		}
		if i&1023 == 0 {
			if err := r.ctx.Err(); err != nil {
				return nil, err
			}
		}
		st := r.cur[i]
		if why := sr.protect[e.Path]; why != "" {
			// What is there now existed before the session: it is not
			// replaced (the recorded file is not lost: it is in the backup).
			r.failWhy(e.Path, Restored, fmt.Errorf("%w holds its name", errPreSession), why)
			continue
		}
		if e.Link != "" {
			members = append(members, i)
			continue
		}
		if r.notTheAgents(e, st) {
			r.set(e.Path, Spared)
			continue
		}
		if st != nil && st.Dev == e.Dev && st.Ino == e.Ino && tsNano(st.Ctim) == e.Ctime {
			r.set(e.Path, Unchanged)
			pl.leaderIno[i] = st.Ino
			continue
		}
		r.planChanged(pl, i, st)
	}
	nLead := len(pl.jobs)
	r.planMembers(pl, sr, members)
	pl.nLead = nLead
	return pl, nil
}

// planChanged decides for entry i, not a hard-link member, that is not
// its recorded inode unchanged: by type, what is right in place only
// needs its metadata, the rest gets a temp (a directory is made now).
func (r *restorer) planChanged(pl *plan, i int, st *unix.Stat_t) {
	e := &r.m.Entries[i]
	switch e.Type {
	case TypeDir:
		if st == nil {
			r.makeDir(pl, i)
		}
	case TypeFile:
		r.planFile(pl, i, st)
	case TypeSymlink:
		if st != nil {
			if t, err := os.Readlink(e.Path); err == nil && t == e.Target {
				pl.metaFix = append(pl.metaFix, i)
				return
			}
		}
		pl.add(&job{i: i, tmp: r.tmpName(e.Path, i), action: pl.action(i, st)})
	default: // fifo, socket, device
		if st != nil && (e.Rdev == 0 || st.Rdev == e.Rdev) {
			pl.metaFix = append(pl.metaFix, i)
			return
		}
		pl.add(&job{i: i, tmp: r.tmpName(e.Path, i), action: pl.action(i, st)})
	}
}

// makeDir makes missing directory i again, private until fixDirs gives
// it its metadata, and journals it (flushed with the temps' intents).
func (r *restorer) makeDir(pl *plan, i int) {
	e := &r.m.Entries[i]
	hook("mkdir", e.Path)
	if err := unix.Mkdir(e.Path, 0o700); err != nil && err != unix.EEXIST {
		r.fail(e.Path, pl.missing(i), err)
		return
	}
	r.madeDir[e.Path] = true
	r.set(e.Path, pl.missing(i))
	r.j.add(jrec{Op: "do", Path: e.Path, Action: pl.missing(i)})
}

// planFile decides for regular file i: content that hashes right needs
// its metadata only (doc.go: "one that changed is hashed, and rewritten
// only if the bytes differ"); otherwise a temp, or a write in place when
// the recorded inode is still there.
func (r *restorer) planFile(pl *plan, i int, st *unix.Stat_t) {
	e := &r.m.Entries[i]
	same := st != nil && st.Dev == e.Dev && st.Ino == e.Ino
	if !validHash(e.Hash) {
		// Another session's file whose content the backup could
		// not take (it was changing): its metadata at most.
		r.bare(i, st, same)
		return
	}
	if st != nil && st.Size == e.Size {
		h, hst, err := hashPath(e.Path)
		if err == nil && h == e.Hash && hst.Ino == st.Ino {
			pl.leaderIno[i] = st.Ino
			pl.metaFix = append(pl.metaFix, i)
			return
		}
	}
	// The file that was there before the session, written
	// since: its content goes back into it, in place, rather than
	// into a new inode renamed over it (which would end it).
	pl.add(&job{i: i, tmp: r.tmpName(e.Path, i), action: pl.action(i, st), inPlace: same})
}

// planMembers decides for hard-link members: fine if they are the
// leader's (final) inode, otherwise a temp linked to it, after the
// leaders' (doc.go: "relinks hard-link members to their leader").
func (r *restorer) planMembers(pl *plan, sr *scanResult, members []int) {
	m := r.m
	var memberJobs []*job
	for _, i := range members {
		e := &m.Entries[i]
		l, ok := r.byIdx[e.Link]
		if !ok {
			r.fail(e.Path, Restored, fmt.Errorf("%w: hard-link leader %s not recorded", ErrCorrupt, e.Link))
			continue
		}
		if why := sr.protect[e.Path]; why != "" {
			r.failWhy(e.Path, Restored, fmt.Errorf("%w holds its name", errPreSession), why)
			continue
		}
		if lj := pl.jobOf[l]; lj != nil && lj.inPlace && r.cur[i] != nil && r.cur[i].Dev == m.Entries[l].Dev && r.cur[i].Ino == m.Entries[l].Ino {
			r.set(e.Path, Unchanged) // the leader's inode, put back in place
			continue
		}
		if pl.jobOf[l] == nil && r.cur[i] != nil && pl.leaderIno[l] != 0 && r.cur[i].Ino == pl.leaderIno[l] {
			r.set(e.Path, Unchanged)
			continue
		}
		memberJobs = append(memberJobs, &job{i: i, tmp: r.tmpName(e.Path, i), action: pl.action(i, r.cur[i])})
	}
	pl.jobs = append(pl.jobs, memberJobs...)
}

// journalJobs journals the temp names and intents, durably, before
// making anything (doc.go: "It journals its intent (temp names ...,
// fsynced) before acting").
func (r *restorer) journalJobs(jobs []*job) error {
	for _, jb := range jobs {
		if !jb.inPlace {
			r.j.add(jrec{Op: "tmp", Path: jb.tmp})
		}
		r.j.add(jrec{Op: "do", Path: r.m.Entries[jb.i].Path, Action: jb.action})
	}
	return r.flushJournal()
}

// makeTemps makes every temp, with content and metadata: in parallel
// (allocating an inode is the slow part on some filesystems), hard-link
// members after their leaders. It returns each job's error.
func (r *restorer) makeTemps(pl *plan) []error {
	jobs, nLead := pl.jobs, pl.nLead
	errs := make([]error, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(4, nLead); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= nLead {
					return
				}
				if err := r.ctx.Err(); err != nil {
					errs[k] = err
					continue
				}
				errs[k] = r.makeTemp(jobs[k], pl.jobOf, pl.leaderIno)
				jobs[k].ok = errs[k] == nil
			}
		}()
	}
	wg.Wait()
	for k := nLead; k < len(jobs); k++ {
		errs[k] = r.makeTemp(jobs[k], pl.jobOf, pl.leaderIno)
		jobs[k].ok = errs[k] == nil
	}
	return errs
}

// dropFailedTemps reports the jobs whose temp could not be made (and
// removes what was made of it), and notes each made leader's new inode.
func (r *restorer) dropFailedTemps(pl *plan, errs []error) {
	for k, jb := range pl.jobs {
		e := &r.m.Entries[jb.i]
		if errs[k] != nil {
			if !jb.inPlace {
				os.Remove(jb.tmp)
			}
			r.fail(e.Path, jb.action, errs[k])
			continue
		}
		if e.Link == "" && e.Type == TypeFile {
			pl.leaderIno[jb.i] = jb.ino
		}
	}
}

// commitTemps renames every made temp over its recorded path (doc.go:
// "writes each file's content into a temp next to it ... and renames it
// over the target"); a write in place is done already.
func (r *restorer) commitTemps(jobs []*job) {
	for _, jb := range jobs {
		if !jb.ok {
			continue
		}
		e := &r.m.Entries[jb.i]
		if jb.inPlace {
			r.set(e.Path, jb.action)
			continue
		}
		hook("rename", e.Path)
		err := os.Rename(jb.tmp, e.Path)
		if errors.Is(err, unix.EPERM) && liftBlocking(e.Path) {
			// The file in the way was made immutable or append-only
			// since (not by the agent: that takes a capability).
			err = os.Rename(jb.tmp, e.Path)
		}
		if err != nil {
			os.Remove(jb.tmp)
			r.fail(e.Path, jb.action, err)
			continue
		}
		r.set(e.Path, jb.action)
	}
}

// setBlockingFlags puts back immutable or append-only flags: a temp with
// them could not have been renamed, nor linked to (a hard-link member's
// temp is renamed after its leader), so they go on once every temp is in
// place (doc.go: "Inode flags are put back last").
func (r *restorer) setBlockingFlags(jobs []*job) {
	for _, jb := range jobs {
		e := &r.m.Entries[jb.i]
		if jb.ok && e.Link == "" && e.Attrs != nil && e.Attrs.Flags&flBlocking != 0 && r.act[e.Path].Error == "" {
			if err := setAttrs(e.Path, e); err != nil {
				r.fail(e.Path, jb.action, err)
			}
		}
	}
}

// fixMetaInPlace puts back the metadata of the paths whose content was
// right, in place (doc.go: "fixes metadata of files whose content is
// right in place").
func (r *restorer) fixMetaInPlace(metaFix []int) {
	for _, i := range metaFix {
		e := &r.m.Entries[i]
		changed, err := applyMeta(e.Path, e, r.cur[i], true)
		if err != nil {
			r.fail(e.Path, Restored, err)
			continue
		}
		if changed {
			r.set(e.Path, Restored)
		} else {
			r.set(e.Path, Unchanged)
		}
	}
}

// fixDirs puts back directories' (and anchors') metadata after their
// contents, deepest first (doc.go: "fixes directories' metadata after
// their contents (deepest first)"): what was done inside moved their times.
func (r *restorer) fixDirs() {
	m := r.m
	for i := len(m.Entries) - 1; i >= 0; i-- {
		e := &m.Entries[i]
		if e.Type != TypeDir || e.Fixed || e.Meta || !r.lim.covers(e.Path) && !r.lim.above(e.Path) {
			continue
		}
		if _, isLeft := r.leftAt(e.Path); isLeft {
			continue // its times too: another holder's entries changed them
		}
		if !r.ownsMeta(e) && !r.madeDir[e.Path] {
			// Another user's directory (/tmp): the agent could only move
			// its times to "now" by adding or removing entries, which are
			// undone one by one; its times also record every other
			// process's changes, which are not the agent's to undo.
			continue
		}
		r.fixDir(e)
	}
}

// fixDir puts back one directory's metadata; of an anchor, or of a
// directory above the limit's roots, only its times (doc.go: an
// anchor's "times are restored").
func (r *restorer) fixDir(e *Entry) {
	timesOnly := e.Anchor || !r.lim.covers(e.Path)
	st, err := lstat(e.Path)
	if err != nil || st == nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err == nil {
			err = unix.ENOENT
		}
		if !timesOnly {
			r.fail(e.Path, Recreated, err)
		}
		return
	}
	if st.Dev == e.Dev && st.Ino == e.Ino && tsNano(st.Ctim) == e.Ctime {
		return
	}
	var changed bool
	if timesOnly {
		if tsNano(st.Mtim) != e.Mtime {
			hook("meta", e.Path)
			err = setTimes(e.Path, e)
			changed = true
		}
	} else {
		changed, err = applyMeta(e.Path, e, st, true)
	}
	if err != nil {
		r.fail(e.Path, Restored, err)
		return
	}
	if changed {
		r.set(e.Path, Restored)
	} else if !timesOnly {
		r.set(e.Path, Unchanged)
	}
}

// mergeResumed adds to this run's report what an interrupted run already
// did (the report, and what it left): doc.go, "the Report then merges
// what the killed run did".
func (r *restorer) mergeResumed(was resumed) {
	for p, a := range was.act {
		e, ok := r.act[p]
		if !ok {
			e = &ReportEntry{Path: p, Action: a}
			r.act[p] = e
			r.order = append(r.order, p)
		} else if e.Action == Unchanged || a == MovedBack && e.Error == "" {
			e.Action = a
		}
		if f := was.from[p]; f != "" && a == MovedBack && e.Action == MovedBack && e.Why == "" {
			e.Why = "found at " + f
			if g, isLeft := r.lim.left(p); isLeft {
				e.Holder = g.Why
			}
		}
	}
}

// finish journals "end" when every path was put back (a failed path
// leaves the restore to resume), and fills the report: ErrIncomplete
// when some path failed (package doc, "Errors").
func (r *restorer) finish(rep *Report) error {
	if r.first == nil {
		r.j.add(jrec{Op: "end"})
		if err := r.flushJournal(); err != nil {
			return err
		}
	}

	for _, p := range r.order {
		rep.Entries = append(rep.Entries, *r.act[p])
	}
	if r.first != nil {
		var pe *Error
		if errors.As(r.first, &pe) {
			return &Error{Op: "restore", Path: pe.Path, Kind: ErrIncomplete, Err: r.first, Hint: fmt.Sprintf("%d path(s) failed, see the report; run the restore again once the cause is fixed", len(rep.Failed()))}
		}
		return fmt.Errorf("%w: %w", ErrIncomplete, r.first)
	}
	return nil
}

// makeTemp creates jb.tmp in its recorded state.
func (r *restorer) makeTemp(jb *job, jobOf []*job, leaderIno []uint64) error {
	e := &r.m.Entries[jb.i]
	if jb.inPlace {
		done, err := r.writeInPlace(jb, e)
		if done || err != nil {
			return err
		}
		// Busy (a running program's file): a new inode after all. The
		// temp is journalled before it is made.
		jb.inPlace = false
		r.jmu.Lock()
		r.j.add(jrec{Op: "tmp", Path: jb.tmp})
		err = r.j.flush()
		r.jmu.Unlock()
		if err != nil {
			return err
		}
	}
	hook("tmp", jb.tmp)
	os.Remove(jb.tmp)
	switch {
	case e.Link != "":
		l := r.byIdx[e.Link]
		src := e.Link
		if lj := jobOf[l]; lj != nil {
			if !lj.ok {
				return fmt.Errorf("hard-link leader %s could not be restored", e.Link)
			}
			if !lj.inPlace {
				src = lj.tmp
			}
		}
		return os.Link(src, jb.tmp)
	case e.Type == TypeFile:
		if !validHash(e.Hash) {
			return fmt.Errorf("%w: no content recorded for %s", ErrCorrupt, e.Path)
		}
		// Read-write: copyOut verifies a clone by reading it.
		fd, err := unix.Open(jb.tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil {
			err = copyOut(r.s.root, e.Hash, fd, st.Dev)
		}
		if err == nil {
			_, err = applyMetaTemp(jb.tmp, e)
		}
		if err == nil {
			// The temp's bytes and metadata are durable before it
			// replaces anything (temp + fsync + rename).
			hook("fsync", jb.tmp)
			err = unix.Fsync(fd)
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
		jb.ino = st.Ino
		return nil
	case e.Type == TypeSymlink:
		if err := os.Symlink(e.Target, jb.tmp); err != nil {
			return err
		}
	default:
		if err := unix.Mknod(jb.tmp, ifmt(e.Type)|0o600, int(e.Rdev)); err != nil {
			return err
		}
	}
	_, err := applyMetaTemp(jb.tmp, e)
	return err
}

// syncAll flushes every filesystem a scope lives on.
func (r *restorer) syncAll() error {
	seen := map[uint64]bool{}
	for _, s := range r.m.Scopes {
		p := nearestExisting(s.Path)
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || seen[st.Dev] {
			continue
		}
		seen[st.Dev] = true
		hook("sync", p)
		if err := syncPath(p); err != nil {
			return pathErr("sync", p, err, p)
		}
	}
	return nil
}

// applyMeta puts e's owner, xattrs, mode, times and inode flags on p
// (never following a symlink). With st (the current stat) only what
// differs is written; cmpX also compares xattrs (a fresh temp always gets
// them written).
func applyMeta(p string, e *Entry, st *unix.Stat_t, cmpX bool) (bool, error) {
	return applyMetaFlags(p, e, st, cmpX, false)
}

// applyMetaTemp is applyMeta for a fresh temp: the immutable and
// append-only flags stay off until it is renamed into place.
func applyMetaTemp(p string, e *Entry) (bool, error) {
	return applyMetaFlags(p, e, nil, false, true)
}

// setAttrs puts e's recorded inode flags on p, blocking ones included.
func setAttrs(p string, e *Entry) error {
	f, err := openFixer(p, e)
	if err != nil {
		return fmt.Errorf("inode flags: %w", err)
	}
	defer f.close()
	if _, err := f.apply(p, false); err != nil {
		return fmt.Errorf("inode flags: %w", err)
	}
	return nil
}

func applyMetaFlags(p string, e *Entry, st *unix.Stat_t, cmpX, keepOff bool) (changed bool, err error) {
	// Flags first lifted (an immutable or append-only inode refuses every
	// other change), set last.
	f, err := openFixer(p, e)
	if err != nil {
		return false, fmt.Errorf("inode flags: %w", err)
	}
	defer f.close()
	if changed, err = f.lift(p); err != nil {
		return changed, fmt.Errorf("inode flags: %w", err)
	}
	c, err := applyStat(p, e, st, cmpX || changed)
	changed = changed || c
	if err != nil {
		return changed, err
	}
	c, err = f.apply(p, keepOff)
	if err != nil {
		return changed, fmt.Errorf("inode flags: %w", err)
	}
	return changed || c, nil
}

// applyStat is applyMeta without the inode flags.
func applyStat(p string, e *Entry, st *unix.Stat_t, cmpX bool) (bool, error) {
	changed := false
	if st == nil || st.Uid != e.UID || st.Gid != e.GID {
		hook("meta", p)
		if err := unix.Lchown(p, int(e.UID), int(e.GID)); err != nil {
			return changed, err
		}
		changed = true
	}
	if st == nil || changed || cmpX {
		cur, err := listXattrs(p)
		if err != nil {
			return changed, err
		}
		if !xattrsEqual(cur, e.Xattrs) {
			for k := range cur {
				if _, ok := e.Xattrs[k]; !ok {
					hook("meta", p)
					if err := unix.Lremovexattr(p, k); err != nil && err != unix.ENODATA {
						return changed, fmt.Errorf("remove xattr %s: %w", k, err)
					}
				}
			}
			for k, v := range e.Xattrs {
				if w, ok := cur[k]; ok && string(w) == string(v) {
					continue
				}
				hook("meta", p)
				if err := unix.Lsetxattr(p, k, v, 0); err != nil {
					return changed, fmt.Errorf("set xattr %s: %w", k, err)
				}
			}
			changed = true
		}
	}
	if e.Type != TypeSymlink {
		var now unix.Stat_t
		if err := unix.Lstat(p, &now); err != nil {
			return changed, err
		}
		if now.Mode&07777 != e.Mode {
			hook("meta", p)
			if err := unix.Fchmodat(unix.AT_FDCWD, p, e.Mode, 0); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	// A Meta entry's atime is compared too: its metadata is all the
	// agent could change there, utimes of the atime alone included, and
	// Restore reads nothing of it. Elsewhere reads move atimes (the
	// agent's, Restore's own hashing of a symlink or a tree compared
	// between restores), so only a write or another change sets them.
	if st == nil || changed || tsNano(st.Mtim) != e.Mtime || e.Meta && e.Type != TypeDir && tsNano(st.Atim) != e.Atime {
		hook("meta", p)
		if err := setTimes(p, e); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

func setTimes(p string, e *Entry) error {
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{nanoTS(e.Atime), nanoTS(e.Mtime)}, unix.AT_SYMLINK_NOFOLLOW)
}
