//go:build linux

package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A file is its inode, not its name. The agent can rename a file the
// backup recorded to a new name in the scope, or give it another name (a
// hard link) and write through that: the recorded path is then missing
// or holds something else, and the new name is a path the backup does
// not know. Removing that new name as "made by the session" would
// destroy a file that existed before it (another session's, even, in a
// shared workdir). So before anything is removed, every path that holds
// a recorded inode under a name not its own is put back: renamed to its
// recorded name, or, if the inode is still there by a recorded name (an
// extra hard link), the extra name is removed. What cannot be put back
// stays where it is, reported; an inode that existed before the session
// is never removed by a restore.

// maxRounds bounds the walks of one restore: each round with a move puts
// at least one more recorded inode at its name for good.
const maxRounds = 64

// fileID is an inode: (dev, ino).
type fileID [2]uint64

func idOf(st *unix.Stat_t) fileID { return fileID{st.Dev, st.Ino} }

// stray is a walked path holding a recorded inode that is not one of
// that inode's recorded names.
type stray struct {
	p   string
	st  unix.Stat_t
	id  fileID
	idx int // the entry recorded at p (another file's), or -1
	// left: in a region Restore leaves: moved out to its name when it
	// has none, and otherwise left where it is.
	left bool
}

type removal struct {
	p   string
	idx int // the entry recorded at p (its type changed), or -1
}

// scanResult is what one walk of the scopes found.
type scanResult struct {
	cur      []*unix.Stat_t
	removals []removal
	strays   []stray
	// doomed: directories that go (unrecorded, or a recorded path whose
	// type changed); what is below them is walked too, for the
	// pre-session inodes in them, which do not go with them.
	doomed map[string]bool
	// protect: paths that must stay (a pre-session inode), with why;
	// holds: directories with a protected path below them.
	protect map[string]string
	holds   map[string]bool
	// reports, run only for the scan Restore acts on (an earlier scan
	// is followed by moves that change what it saw).
	reports []func()
}

func (sr *scanResult) keep(p, why string) {
	sr.protect[p] = why
	for q := p; q != "/"; {
		q = parent(q)
		if sr.holds[q] {
			break
		}
		sr.holds[q] = true
	}
}

func (sr *scanResult) report(f func()) { sr.reports = append(sr.reports, f) }

// parkPrefix names the temporary name a recorded path's occupant is moved
// to so that the file recorded there can come back; it is walked like
// any unrecorded path afterwards (moved back in turn, removed, or kept).
func (r *restorer) parkPrefix() string { return ".klock-mv-" + r.m.Session + "-" }

func (r *restorer) isPark(p string) bool {
	return strings.HasPrefix(p[strings.LastIndexByte(p, '/')+1:], r.parkPrefix())
}

// leftAt is the region that leaves p, if any: Leave's regions and the
// manifest's Others, except a reclaimed path and Restore's own park names.
func (r *restorer) leftAt(p string) (Region, bool) {
	if r.lim.reclaim[p] || r.isPark(p) {
		return Region{}, false
	}
	return r.lim.left(p)
}

// indexInodes maps every recorded inode (anchors aside) to its entries,
// the group's leader (the name content goes to) first.
func (r *restorer) indexInodes() {
	r.ids = map[fileID][]int{}
	for i := range r.m.Entries {
		e := &r.m.Entries[i]
		if e.Anchor || e.Ino == 0 {
			continue
		}
		id := fileID{e.Dev, e.Ino}
		r.ids[id] = append(r.ids[id], i)
	}
	for id, g := range r.ids {
		sort.SliceStable(g, func(a, b int) bool { return r.rank(g[a]) < r.rank(g[b]) })
		r.ids[id] = g
	}
}

// rank orders a group's names: a leader in the scopes, its members, then
// Meta names (metadata only, outside the scopes).
func (r *restorer) rank(i int) int {
	e := &r.m.Entries[i]
	switch {
	case e.Meta:
		return 2
	case e.Link != "":
		return 1
	}
	return 0
}

// preSession says whether the unrecorded inode at p existed before the
// session began: born (statx btime, where the filesystem keeps it) before
// Take started, and with no other name (a hard link's extra name may go:
// the inode lives on by its other name; a directory has no other name).
func (r *restorer) preSession(p string, st *unix.Stat_t) (bool, string) {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		return false, ""
	}
	born, ok := btimeOf(p, st)
	if !ok || born >= r.start {
		return false, ""
	}
	return true, fmt.Sprintf("it existed before the session (inode %d, born %s) and its old name is unknown: not removed, it stays where it is",
		st.Ino, time.Unix(0, born).UTC().Format(time.RFC3339Nano))
}

// btimeOf is the birth time (ns) of the inode st at p, where the
// filesystem keeps one.
func btimeOf(p string, st *unix.Stat_t) (int64, bool) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_BTIME|unix.STATX_INO, &sx); err != nil {
		return 0, false
	}
	if sx.Mask&unix.STATX_BTIME == 0 || sx.Ino != st.Ino {
		return 0, false
	}
	return sx.Btime.Sec*1e9 + int64(sx.Btime.Nsec), true
}

// isRecorded says whether st, found at p, is the inode entry i recorded,
// not a file made since that got its number (a freed inode's number is
// given again): of its type, and born before the backup saw it.
func (r *restorer) isRecorded(p string, st *unix.Stat_t, i int) bool {
	e := &r.m.Entries[i]
	if typeOf(st.Mode) != e.Type || st.Dev != e.Dev || st.Ino != e.Ino {
		return false
	}
	born, ok := btimeOf(p, st)
	return !ok || born < r.start || born <= e.Ctime
}

// recordedID is the recorded inode st is (see isRecorded), if any.
func (r *restorer) recordedID(p string, st *unix.Stat_t) (fileID, []int, bool) {
	id := idOf(st)
	g, hit := r.ids[id]
	if !hit || !r.isRecorded(p, st, g[0]) {
		return id, nil, false
	}
	return id, g, true
}

// errPreSession: a path Restore would remove holds a file that existed
// before the session.
var errPreSession = errors.New("a file that existed before the session")

// scan walks the scopes: what exists now, what must go, and the recorded
// inodes found under other names.
func (r *restorer) scan() (*scanResult, error) {
	sc := &scanner{r: r, sr: &scanResult{cur: make([]*unix.Stat_t, len(r.m.Entries)), doomed: map[string]bool{}, protect: map[string]string{}, holds: map[string]bool{}}}
	err := walkScopes(r.m.Scopes, r.m.Exclude, sc.visit)
	return sc.sr, err
}

// scanner is one walk of the scopes (scan): the restorer, and what the
// walk found so far.
type scanner struct {
	r  *restorer
	sr *scanResult
}

// see notes st as what is now at recorded entry i's name.
func (sr *scanResult) see(i int, st *unix.Stat_t) {
	c := *st
	sr.cur[i] = &c
}

// visit judges one walked path, and says whether the walk goes below it
// (walkScopes). The cases are in the order they take precedence: below a
// directory that goes, Fixed, outside the limit, in a left region, a
// recorded inode under another name, an unrecorded path, a recorded one.
func (sc *scanner) visit(p string, st *unix.Stat_t) (bool, error) {
	r, m := sc.r, sc.r.m
	if sc.sr.doomed[parent(p)] {
		return sc.belowDoomed(p, st), nil
	}
	i, ok := r.byIdx[p]
	if ok && m.Entries[i].Fixed {
		// The agent could not change it: whatever changed it since
		// was another process, and stays (below a directory the
		// agent could not enter, everything does).
		return !m.Entries[i].Closed, nil
	}
	park := r.isPark(p)
	if !park && !r.lim.covers(p) {
		return sc.outsideLimit(p, st, i, ok), nil
	}
	if g, isLeft := r.leftAt(p); isLeft {
		return sc.inLeft(p, st, g, i, ok), nil
	}
	recorded := ok && !m.Entries[i].Anchor
	if id, g, hit := r.recordedID(p, st); hit && !(recorded && r.inGroup(i, g)) {
		return sc.stray(p, st, id, i, recorded), nil
	}
	if !recorded {
		return sc.unrecorded(p, st), nil
	}
	return sc.recorded(p, st, i), nil
}

// doom: p goes (idx: the entry recorded there, whose type changed),
// unless it existed before the session (doc.go: "An unrecorded file or
// directory Restore would remove ... that was born ... before Take
// began and has one link is kept"). It says whether to walk below p.
func (sc *scanner) doom(p string, st *unix.Stat_t, idx int) bool {
	r, sr := sc.r, sc.sr
	if old, why := r.preSession(p, st); old {
		sr.keep(p, why)
		if idx < 0 && sr.protect[parent(p)] == "" {
			// The topmost kept path is reported; below it, it is said.
			sr.report(func() { r.failWhy(p, Spared, fmt.Errorf("%w (inode %d)", errPreSession, st.Ino), why) })
		}
	}
	sr.removals = append(sr.removals, removal{p, idx})
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		sr.doomed[p] = true
		return true
	}
	return false
}

// belowDoomed judges a path below a directory that goes: only a
// pre-session inode here is judged on its own (it does not go with it).
func (sc *scanner) belowDoomed(p string, st *unix.Stat_t) bool {
	r, sr := sc.r, sc.sr
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if id, _, hit := r.recordedID(p, st); hit {
		sr.strays = append(sr.strays, stray{p: p, st: *st, id: id, idx: -1})
		return false
	}
	if old, why := r.preSession(p, st); old {
		sr.keep(p, why)
		if sr.protect[parent(p)] == "" {
			sr.report(func() { r.failWhy(p, Spared, fmt.Errorf("%w (inode %d)", errPreSession, st.Ino), why) })
		}
	}
	if isDir {
		sr.doomed[p] = true
	}
	return isDir
}

// outsideLimit judges a path outside the limit (Only): nothing is
// removed; a directory on the way to one of its roots is walked through.
func (sc *scanner) outsideLimit(p string, st *unix.Stat_t, i int, ok bool) bool {
	r, m := sc.r, sc.r.m
	if !r.lim.above(p) {
		return false
	}
	if ok && !m.Entries[i].Anchor && typeOf(st.Mode) == m.Entries[i].Type {
		sc.sr.see(i, st)
	}
	return true
}

// inLeft judges a path in a region Restore leaves (Leave, Others):
// another holder's, not put back, not removed. A recorded directory is
// walked (what changed in it is reported), a new one is reported whole.
func (sc *scanner) inLeft(p string, st *unix.Stat_t, g Region, i int, ok bool) bool {
	r, m, sr := sc.r, sc.r.m, sc.sr
	if id, grp, hit := r.recordedID(p, st); hit && !(ok && r.inGroup(i, grp)) && r.restorable(grp[0]) {
		// A file of this session's own regions, there by the
		// agent's doing (the holder could not reach it; nor can
		// it have a link there to it): moved back to its name if
		// it has none, never removed.
		sr.strays = append(sr.strays, stray{p: p, st: *st, id: id, idx: -1, left: true})
	}
	if !ok || m.Entries[i].Anchor || typeOf(st.Mode) != m.Entries[i].Type {
		sr.report(func() { r.leave(p, g) })
		return false
	}
	sr.see(i, st)
	return true
}

// stray notes a recorded inode under a name not its own: moved back (or
// its extra name removed), decided once the walk is done (placeHome,
// settle). recorded: another entry is recorded at p (entry i).
func (sc *scanner) stray(p string, st *unix.Stat_t, id fileID, i int, recorded bool) bool {
	m, sr := sc.r.m, sc.sr
	s := stray{p: p, st: *st, id: id, idx: -1}
	if recorded {
		s.idx = i
	}
	sr.strays = append(sr.strays, s)
	if !recorded {
		return false // a directory's subtree goes with it
	}
	if typeOf(st.Mode) != m.Entries[i].Type {
		return false
	}
	sr.see(i, st)
	return st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// unrecorded judges a path the backup does not know: it goes (doom),
// unless it is not the agent's doing (in a Fixed directory, or another
// uid's with SpareOthersNew) or holds what a region below leaves.
func (sc *scanner) unrecorded(p string, st *unix.Stat_t) bool {
	r, m, sr := sc.r, sc.r.m, sc.sr
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if pi, pok := r.byIdx[parent(p)]; pok && m.Entries[pi].Fixed {
		// New in a directory the agent could not change: not its
		// doing, --all or not. What the agent made inside goes.
		sr.report(func() { r.set(p, Spared) })
		return true
	}
	if r.lim.spare && m.AgentUID != nil && st.Uid != *m.AgentUID {
		sr.report(func() { r.set(p, Spared) })
		return true // what the agent made inside goes
	}
	if g, holds := r.lim.holdsLeft(p); holds && isDir {
		// Removing it would remove what a region below leaves:
		// it stays, and what else is new in it is judged alone.
		sr.report(func() { r.leave(p, g) })
		return true
	}
	return sc.doom(p, st, -1)
}

// recorded judges recorded entry i's path: of another type now, it goes
// (unless it holds what a region below leaves); another file in its
// place is replaced, unless it existed before the session.
func (sc *scanner) recorded(p string, st *unix.Stat_t, i int) bool {
	r, m, sr := sc.r, sc.r.m, sc.sr
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if typeOf(st.Mode) != m.Entries[i].Type {
		if g, holds := r.lim.holdsLeft(p); holds {
			sr.report(func() { r.leave(p, g) })
			return false
		}
		return sc.doom(p, st, i)
	}
	if !isDir && (st.Dev != m.Entries[i].Dev || st.Ino != m.Entries[i].Ino) {
		// Another file in its place: replaced, unless it existed
		// before the session (the agent renamed it over the path).
		if old, why := r.preSession(p, st); old {
			sr.keep(p, why)
		}
	}
	sr.see(i, st)
	return true
}

// inGroup says whether entry i is one of group g's names.
func (r *restorer) inGroup(i int, g []int) bool {
	for _, k := range g {
		if k == i {
			return true
		}
	}
	return false
}

// homeAlive is a recorded name of id's group that holds it now, if any.
func (r *restorer) homeAlive(id fileID) (int, bool) {
	for _, k := range r.ids[id] {
		p := r.m.Entries[k].Path
		if st, _ := lstat(p); st != nil && r.isRecorded(p, st, k) {
			return k, true
		}
	}
	return -1, false
}

// restorable says whether Restore puts recorded path i back (and may so
// replace what is there): covered, not left, not Fixed, Meta or an anchor.
func (r *restorer) restorable(i int) bool {
	e := &r.m.Entries[i]
	if e.Fixed || e.Meta || e.Anchor || !r.lim.covers(e.Path) {
		return false
	}
	_, isLeft := r.leftAt(e.Path)
	return !isLeft
}

// placement is one name to give back: the inode at from goes to entry to,
// by rename (a stray) or by link (another recorded name holds it).
type placement struct {
	from string
	id   fileID
	to   int
	link bool
}

// placeHome gives every recorded inode found only under names not its own
// its recorded name back, and a hard-link group's leader name its inode
// when only another of its names holds it. It returns whether it changed
// anything (then the scopes are walked again).
func (r *restorer) placeHome(sr *scanResult) bool {
	var todo []placement
	planned := map[fileID]bool{}
	for _, s := range sr.strays {
		if planned[s.id] || r.noPlace[s.id] {
			continue
		}
		if _, alive := r.homeAlive(s.id); alive {
			continue // an extra name: it goes, the inode stays
		}
		planned[s.id] = true
		todo = append(todo, placement{from: s.p, id: s.id, to: r.ids[s.id][0]})
	}
	for id, g := range r.ids {
		if len(g) < 2 || planned[id] || r.noPlace[id] || r.m.Entries[g[0]].Type != TypeFile {
			continue
		}
		lead := g[0]
		if st, _ := lstat(r.m.Entries[lead].Path); st != nil && r.isRecorded(r.m.Entries[lead].Path, st, lead) {
			continue
		}
		if k, alive := r.homeAlive(id); alive && r.restorable(lead) {
			todo = append(todo, placement{from: r.m.Entries[k].Path, id: id, to: lead, link: true})
		}
	}
	// Shallowest first: a directory moved back brings what it holds.
	sort.Slice(todo, func(a, b int) bool {
		pa, pb := r.m.Entries[todo[a].to].Path, r.m.Entries[todo[b].to].Path
		if da, db := strings.Count(pa, "/"), strings.Count(pb, "/"); da != db {
			return da < db
		}
		return pa < pb
	})
	done := false
	for _, pl := range todo {
		if r.ctx.Err() != nil {
			return done
		}
		if r.place(pl) {
			done = true
		}
	}
	return done
}

// place performs one placement; false when it did nothing (it may be
// possible after others: the scopes are walked again while any succeeds).
// The move is journalled before it is made (doc.go: "It journals its
// intent (temp names, moves back ..., fsynced) before acting").
func (r *restorer) place(pl placement) bool {
	e := &r.m.Entries[pl.to]
	dest := e.Path
	src, err := lstat(pl.from)
	if err != nil || src == nil || idOf(src) != pl.id {
		return false // moved meanwhile (with a directory above it)
	}
	if !r.makeParents(dest) {
		return false // its directory is not there, and is not Restore's to make
	}
	occ, err := lstat(dest)
	if err != nil {
		return false
	}
	park, ok := r.parkFor(pl, dest, src, occ)
	if !ok {
		return false
	}
	if !r.journalPlace(pl, dest, park) {
		return false
	}
	if park != "" {
		hook("rename", park)
		if err := renameNoReplace(dest, park); err != nil {
			r.failWhy(dest, MovedBack, err, "found at "+pl.from)
			r.noPlace[pl.id] = true
			return false
		}
	}
	if err := r.giveName(pl, dest, occ != nil && park == ""); err != nil {
		r.failWhy(dest, MovedBack, err, "found at "+pl.from)
		r.noPlace[pl.id] = true
		return park != ""
	}
	r.placed(pl, dest)
	return true
}

// parkFor decides what happens to occ, the occupant of dest (nil: none):
// ok is false when it stays (the placement is not made); park is the
// name it is moved aside to, or "" when the move replaces it (a file
// the session made).
func (r *restorer) parkFor(pl placement, dest string, src, occ *unix.Stat_t) (park string, ok bool) {
	if occ == nil {
		return "", true
	}
	if idOf(occ) == pl.id {
		return "", false
	}
	// Something else holds the name: only what Restore would
	// replace there anyway makes way, and never a file that existed
	// before the session and is not recorded.
	if !r.restorable(pl.to) {
		return "", false
	}
	_, _, known := r.recordedID(dest, occ)
	if !known {
		if old, _ := r.preSession(dest, occ); old {
			return "", false
		}
	}
	if known || occ.Mode&unix.S_IFMT == unix.S_IFDIR || src.Mode&unix.S_IFMT == unix.S_IFDIR || pl.link {
		// Moved aside, to be judged on the next walk (put back in
		// turn, removed, or kept).
		for n := 0; ; n++ {
			park = filepath.Join(filepath.Dir(dest), r.parkPrefix()+strconv.Itoa(n))
			if st, _ := lstat(park); st == nil {
				break
			}
		}
		if in, _ := inScope(r.m.Scopes, park); !in || excluded(park, r.m.Exclude) {
			return "", false
		}
	}
	return park, true
}

// journalPlace journals the move back (and the park), durably, before
// it is made: a resumed restore reports it (it finds the file at its
// name, and does the rest again from what it finds). False when the
// journal could not be written (reported).
func (r *restorer) journalPlace(pl placement, dest, park string) bool {
	r.j.add(jrec{Op: "do", Path: dest, Action: MovedBack, From: pl.from})
	if park != "" {
		r.j.add(jrec{Op: "park", Path: park, From: dest})
	}
	if err := r.j.flush(); err != nil {
		r.fail(dest, MovedBack, err)
		r.noPlace[pl.id] = true
		return false
	}
	return true
}

// giveName gives the inode at pl.from the name dest: a link, or a
// rename (over dest when replace: a file the session made there).
func (r *restorer) giveName(pl placement, dest string, replace bool) error {
	if pl.link {
		hook("link", dest)
		return os.Link(pl.from, dest)
	}
	hook("rename", dest)
	if replace {
		return os.Rename(pl.from, dest) // over a file the session made
	}
	return renameNoReplace(pl.from, dest)
}

// placed reports a placement made: the recorded path it left is vacated
// (put back as replaced), and a rename is MovedBack, saying from where
// (and, in a left region, whose it is).
func (r *restorer) placed(pl placement, dest string) {
	if pl.from != "" {
		if i, ok := r.byIdx[pl.from]; ok && !pl.link {
			r.vacated[i] = true
		}
	}
	if !pl.link {
		r.set(dest, MovedBack)
		r.act[dest].Why = "found at " + pl.from
		if g, isLeft := r.lim.left(dest); isLeft {
			r.act[dest].Holder = g.Why
		}
	}
}

func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL || err == unix.ENOSYS {
		if st, _ := lstat(to); st != nil {
			return unix.EEXIST
		}
		return os.Rename(from, to)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// settle decides the strays left once nothing more can be moved back: an
// extra name of an inode that still has its recorded name goes (unless
// SpareOthersNew spares it); one that could not be moved back stays, and
// is a failure.
func (r *restorer) settle(sr *scanResult) {
	m := r.m
	for _, s := range sr.strays {
		if s.left {
			continue // left as found
		}
		if _, alive := r.homeAlive(s.id); alive {
			if s.idx >= 0 {
				if typeOf(s.st.Mode) != m.Entries[s.idx].Type {
					sr.removals = append(sr.removals, removal{s.p, s.idx})
				}
				continue // replaced by the recorded file
			}
			if r.lim.spare && m.AgentUID != nil && s.st.Uid != *m.AgentUID {
				r.set(s.p, Spared)
				continue
			}
			sr.removals = append(sr.removals, removal{s.p, -1})
			continue
		}
		home := m.Entries[r.ids[s.id][0]].Path
		why := fmt.Sprintf("the file recorded at %s (inode %d, there before the session) is here under another name and could not be moved back: not removed, it stays here", home, s.id[1])
		sr.keep(s.p, why)
		if s.idx < 0 {
			r.failWhy(s.p, Spared, fmt.Errorf("%w (inode %d) could not be moved back to %s", errPreSession, s.id[1], home), why)
		}
	}
}

// removeTree removes p and everything below it, except the protected
// paths (and the directories on their way).
func (r *restorer) removeTree(p string, sr *scanResult) error {
	if sr.protect[p] == "" && !sr.holds[p] {
		return removeAll(p)
	}
	st, err := lstat(p)
	if err != nil || st == nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	var first error
	for _, n := range names {
		if err := r.removeTree(join(p, n), sr); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// failWhy is fail with a reason for the report.
func (r *restorer) failWhy(p string, a Action, err error, why string) {
	r.fail(p, a, err)
	if e := r.act[p]; e.Why == "" {
		e.Why = why
	} else if !strings.Contains(e.Why, why) {
		e.Why += "; " + why
	}
}

// reclaimWhy is what a reclaimed entry's report says.
const reclaimWhy = "another session's file, put back to its state when this session began"

// reportReclaimed marks every reclaimed path's entry with the region it
// lay in (Holder: the region's Why, naming the holder).
func (r *restorer) reportReclaimed() {
	for _, p := range r.lim.reclaimed {
		g, isLeft := r.lim.left(p)
		e, ok := r.act[p]
		if !isLeft || !ok {
			continue
		}
		e.Holder = g.Why
		switch {
		case e.Why == "":
			e.Why = reclaimWhy
		case !strings.Contains(e.Why, reclaimWhy):
			e.Why = reclaimWhy + "; " + e.Why
		}
	}
}

// writeInPlace puts e's recorded content and metadata back into the
// recorded inode at e.Path itself. done is false when it did nothing and
// a temp must do (the file is a running program's, or is no longer the
// recorded inode). Killed midway, the file holds part of the content: the
// next restore finds it differs and writes it again.
func (r *restorer) writeInPlace(jb *job, e *Entry) (done bool, err error) {
	hook("inplace", e.Path)
	open := func() (int, error) {
		// Read-write when allowed: copyOut verifies a clone by reading it.
		const flags = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
		fd, err := unix.Open(e.Path, unix.O_RDWR|flags, 0)
		if err == unix.EACCES {
			fd, err = unix.Open(e.Path, unix.O_WRONLY|flags, 0)
		}
		return fd, err
	}
	fd, err := open()
	if err == unix.EPERM && liftBlocking(e.Path) {
		// Immutable or append-only now (not the agent's doing: it takes
		// a capability); the recorded flags go back on below.
		fd, err = open()
	}
	switch {
	case err == unix.ETXTBSY || err == unix.ENOENT || err == unix.ELOOP || err == unix.ENXIO:
		return false, nil
	case err != nil:
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if st.Dev != e.Dev || st.Ino != e.Ino || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, nil
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return false, err
	}
	if err := copyOut(r.s.root, e.Hash, fd, st.Dev); err != nil {
		return false, err
	}
	if _, err := applyMetaTemp(e.Path, e); err != nil {
		return false, err
	}
	hook("fsync", e.Path)
	if err := unix.Fsync(fd); err != nil {
		return false, err
	}
	jb.ino = st.Ino
	return true, nil
}

// bare handles a recorded regular file the backup holds no content of
// (Options.Others: it was changing, or unreadable, while the backup was
// taken): its metadata goes back on the recorded inode when that is where
// it belongs, and the entry fails, saying what was done.
func (r *restorer) bare(i int, st *unix.Stat_t, same bool) {
	e := &r.m.Entries[i]
	if same && tsNano(st.Ctim) == e.Ctime {
		r.set(e.Path, Unchanged)
		return
	}
	done := "it was left as found"
	switch {
	case st == nil:
		done = "it is missing and was not made again"
	case same:
		if _, err := applyMeta(e.Path, e, st, true); err != nil {
			r.fail(e.Path, Restored, err)
			return
		}
		done = "its metadata was put back"
		if a := r.act[e.Path]; a != nil && a.Action == MovedBack {
			done = "it was moved back (" + a.Why + ") and its metadata put back"
		}
	}
	r.failWhy(e.Path, Restored, fmt.Errorf("its content was not recorded (it was changing while the backup was taken); %s", done), "content not recorded; "+done)
}

// makeParents makes p's missing directories that are recorded and that
// Restore puts back (as it would anyway), so that a file can be moved
// back into them; false if p's directory is not there and cannot be.
func (r *restorer) makeParents(p string) bool {
	d := parent(p)
	if st, _ := lstat(d); st != nil {
		return st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	i, ok := r.byIdx[d]
	if !ok || r.m.Entries[i].Type != TypeDir || !r.restorable(i) || !r.makeParents(d) {
		return false
	}
	r.j.add(jrec{Op: "do", Path: d, Action: Recreated})
	if r.j.flush() != nil {
		return false
	}
	hook("mkdir", d)
	if err := unix.Mkdir(d, 0o700); err != nil && err != unix.EEXIST {
		return false
	}
	r.madeDir[d] = true
	r.set(d, Recreated)
	return true
}
