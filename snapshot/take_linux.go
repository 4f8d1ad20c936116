//go:build linux

package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/policy"

	"github.com/klocklabs/klock/internal/dirsync"
)

// Options tune Take.
type Options struct {
	// Dir is the backups root; empty means <workdir>/.klock/backups.
	Dir string
	// Session names the snapshot: letters, digits, '.', '_', '-', at most
	// 128, not starting with '.'.
	Session string
	// Scopes overrides what is recorded; nil means WallScopes(rs).
	Scopes []Scope
	// Exclude lists more paths (and their subtrees) never recorded nor
	// removed. Dir and <workdir>/.klock are always excluded.
	Exclude []string
	// Progress, when set, is called with bytes done and bytes total while
	// content is copied (at most ten times a second, and once at the end).
	// Use TerminalProgress to draw a bar only on a terminal.
	Progress func(done, total int64)
	// Workers copying content in parallel; 0 means a default (4, or the
	// number of CPUs when larger).
	Workers int
	// AgentUID, when set, is the uid the agent runs as, recorded so that
	// Restore with SpareOthersNew leaves the new paths it cannot have made.
	// With it, Take backs up only what that uid (with AgentGIDs, and no
	// capabilities) could change: a path it could not is recorded as
	// Fixed, without content, and Restore leaves it alone; a directory it
	// could not enter is not walked (Entry.Closed). A shared scope such as
	// /tmp/** holds other users' files, which must neither cost a copy nor
	// refuse the session when they change.
	AgentUID *uint32
	// AgentGIDs are the agent's groups (primary and supplementary), for
	// the group permission bits.
	AgentGIDs []uint32
	// MetaScopes (with AgentUID) are regions outside the scopes where the
	// agent may own files, whose metadata it can change though it can
	// write nothing there (see MetaScopes): every path there whose
	// metadata that uid could change is recorded as a Meta entry,
	// metadata only. MetaLimit bounds the paths that walk looks at (0:
	// DefaultMetaLimit); the regions it did not finish are listed in
	// Manifest.MetaCut, and the backup is taken all the same.
	MetaScopes []Scope
	MetaLimit  int
	// Others are trees another session holds a changing lease on when
	// the backup is taken (a session used to pass them as Exclude). The
	// part of them inside the scopes is recorded too, as Other entries:
	// metadata, dev/ino and, where the file holds still while it is
	// read, content (the object store and the stat-cache index are
	// shared, so a file another session's backup just hashed costs a
	// stat). Best effort: a file there that changes while it is read, or
	// cannot be read, is recorded without content, one that vanishes or
	// cannot be listed is left out, and Take never fails nor retries
	// because of them. Restore leaves them as it finds them unless it is
	// told to reclaim one (Reclaim), and moves a file of theirs the agent
	// renamed into its own scope back to its name.
	Others []string
	// Ready, when set, is called once everything is recorded and copied
	// under the temporary directory, before any new object is stored (a
	// backup with none is committed before it): a caller may start the
	// walk before it knows the backup will be wanted (a session whose
	// walls may still refuse it) and decide then. An error from it
	// abandons the backup, leaving nothing behind, and Take returns it.
	Ready func() error
}

func checkSession(s string) error {
	if !policy.ValidName(s, 128) || s == objectsDir || s == indexFile {
		return fmt.Errorf("%w: session id %q: want 1-128 letters, digits, '.', '_' or '-', not starting with '.', and not %q or %q", ErrInvalid, s, objectsDir, indexFile)
	}
	return nil
}

// Snapshot is one session's recorded state, taken by Take or opened by Open.
type Snapshot struct {
	root string
	// mu guards m and the byPath index: Add replaces them while the
	// session runs; every other method reads them under it.
	mu sync.RWMutex
	m  *Manifest
	// byPath: the recorded entries by path (Existed, ChangedSince), made
	// on first use; closed: some are Closed directories.
	byPathOnce sync.Once
	byPath     map[string]*Entry
	closed     bool
	// links: each hard-link group's first path -> every recorded name of
	// its inode (OtherNames), made with byPath.
	links map[string][]string
	// Stats is what Take did (zero for an opened snapshot).
	Stats Stats
}

// Session is the session id.
func (s *Snapshot) Session() string { return s.manifest().Session }

// Dir is the session's directory, <root>/<session>.
func (s *Snapshot) Dir() string { return filepath.Join(s.root, s.manifest().Session) }

// Manifest is the recorded state (do not modify it). Add replaces it
// with a new one: call Manifest again after an Add.
func (s *Snapshot) Manifest() *Manifest { return s.manifest() }

// Info summarises the snapshot.
func (s *Snapshot) Info() Info { return infoOf(s.manifest(), 0) }

func (s *Snapshot) manifest() *Manifest {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m
}

func infoOf(m *Manifest, newBytes int64) Info {
	in := Info{Session: m.Session, Created: m.Created, Started: m.Started, Workdir: m.Workdir, Entries: len(m.Entries), NewBytes: newBytes}
	for _, e := range m.Entries {
		if e.Type == TypeFile && e.Link == "" && !e.Fixed && !e.Meta {
			in.Files++
			in.Bytes += e.Size
		}
	}
	return in
}

// Take records, before the agent starts, every path the agent will be able
// to change (see Options.Scopes), so that Restore can bring it back. It
// writes <root>/<session>/ and new objects durably and atomically: on any
// error nothing it made is left behind and the error is an *Error naming
// the path (errors.Is ErrNoSpace / ErrPermission / the errno).
func Take(ctx context.Context, rs *policy.Ruleset, opts Options) (*Snapshot, error) {
	start := time.Now()
	if err := checkSession(opts.Session); err != nil {
		return nil, err
	}
	root := opts.Dir
	workdir := ""
	if rs != nil {
		workdir = rs.Workdir
	}
	if root == "" {
		if workdir == "" {
			return nil, fmt.Errorf("%w: no backup directory: set Options.Dir or the ruleset's workdir", ErrInvalid)
		}
		root = filepath.Join(workdir, ".klock", "backups")
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("%w: backup directory %q is not absolute", ErrInvalid, root)
	}
	root = filepath.Clean(root)
	scopes := opts.Scopes
	if scopes == nil {
		if rs == nil {
			return nil, fmt.Errorf("%w: no ruleset and no scopes", ErrInvalid)
		}
		scopes = WallScopes(rs)
	} else {
		scopes = normalize(scopes)
	}
	if err := checkScopes(scopes); err != nil {
		return nil, err
	}
	ex := []string{root}
	if workdir != "" {
		ex = append(ex, filepath.Join(workdir, ".klock"))
	}
	for _, x := range opts.Exclude {
		ex = append(ex, filepath.Clean(x))
	}
	var others []string
	for _, o := range opts.Others {
		if o = filepath.Clean(o); filepath.IsAbs(o) && !slices.Contains(others, o) {
			others = append(others, o)
		}
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = max(4, runtime.NumCPU())
	}
	t := &taker{start: start, others: others, ctx: ctx, root: root, workdir: workdir, session: opts.Session, scopes: scopes, exclude: ex, progress: opts.Progress, workers: workers, agentUID: opts.AgentUID, reach: map[string]reach{}, ready: opts.Ready}
	if opts.AgentUID != nil {
		t.agent = &agent{uid: *opts.AgentUID, gids: opts.AgentGIDs}
	}
	for _, m := range normalize(opts.MetaScopes) {
		if filepath.IsAbs(m.Path) && m.Path != "/" {
			t.meta = append(t.meta, m)
		}
	}
	if t.metaLimit = opts.MetaLimit; t.metaLimit <= 0 {
		t.metaLimit = DefaultMetaLimit
	}
	snap, err := t.run()
	if err != nil {
		t.cleanup()
		return nil, err
	}
	snap.Stats.Duration = time.Since(start)
	return snap, nil
}

type taker struct {
	start     time.Time
	others    []string // Options.Others, clean
	agentUID  *uint32
	agent     *agent // nil: everything in the scopes is recorded
	ctx       context.Context
	root      string
	workdir   string
	session   string
	scopes    []Scope
	exclude   []string
	meta      []Scope // Options.MetaScopes
	metaLimit int
	progress  func(done, total int64)
	workers   int
	ready     func() error // Options.Ready

	reach    map[string]reach // what the agent can do with each directory walked
	made     []string         // directories Take created (parents first)
	tmpDir   string           // <root>/.tmp-<session>
	renamed  []string         // objects Take moved into the store
	indexTmp string
	index    index // what indexTmp holds
	unlock   func()
	stats    Stats
}

func (t *taker) cleanup() {
	if t.tmpDir != "" {
		os.RemoveAll(t.tmpDir)
	}
	for _, o := range t.renamed {
		os.Remove(o)
	}
	if t.indexTmp != "" {
		os.Remove(t.indexTmp)
	}
	for i := len(t.made) - 1; i >= 0; i-- {
		os.Remove(t.made[i]) // only when empty
	}
	if t.unlock != nil {
		t.unlock()
	}
}

// run takes the backup in the order the package doc's "Guarantees"
// give: everything is written under <root>/.tmp-<session>, flushed,
// objects renamed into the store, flushed again, and the session
// directory renamed into place and its parent fsynced. Each phase is one
// method below; on an error, Take's cleanup removes what they made.
func (t *taker) run() (*Snapshot, error) {
	if err := t.lockRoot(); err != nil {
		return nil, err
	}
	final, rootDev, err := t.makeTmpDir()
	if err != nil {
		return nil, err
	}
	m, entries, metaEntries, err := t.record()
	if err != nil {
		return nil, err
	}

	// Hashes: from the index when the stat matches, otherwise by reading.
	ix := indexSeen.load(t.root)
	jobs, total := t.hashJobs(entries, ix)
	c := &copier{t: t, entries: entries, jobs: jobs, total: total, rootDev: rootDev,
		copied: make([]bool, len(entries)), gone: make([]bool, len(entries))}
	if err := c.run(); err != nil {
		return nil, err
	}
	kept, err := dropGone(entries, c.gone)
	if err != nil {
		return nil, err
	}
	c.report(true)
	t.countCopies(c, kept)
	// With nothing new to store, the backup is written, flushed and
	// committed while the caller decides (Ready), and removed if the
	// answer is no: a session's walls come up meanwhile, and its agent
	// waits for no fsync after them. New objects go into the shared store
	// only once the backup is wanted.
	stage := func() error {
		newBytes, err := t.storeObjects(entries, c.copied)
		if err != nil {
			return err
		}
		linkHashes(entries)
		linkHashes(kept) // a copy when a file went: the manifest is made of it
		if err := t.writeIndex(ix, entries); err != nil {
			return err
		}
		m.Entries = append(kept, metaEntries...)
		return t.stage(m, newBytes, final)
	}
	early := t.stats.Copied == 0
	if early {
		if err := stage(); err != nil {
			return nil, err
		}
		if err := t.publish(final); err != nil {
			return nil, err
		}
	}
	if t.ready != nil {
		if err := t.ready(); err != nil {
			if early {
				// Not wanted after all: gone again. Should klock stop
				// before this, the backup of a session that never ran
				// is left (what it recorded is as the files were).
				os.RemoveAll(final)
			}
			return nil, err
		}
	}
	if !early {
		if err := stage(); err != nil {
			return nil, err
		}
		if err := t.publish(final); err != nil {
			return nil, err
		}
	}
	pastStart(t.start)
	t.unlock()
	t.unlock = nil
	t.stats.Entries = len(m.Entries)
	return &Snapshot{root: t.root, m: m, Stats: t.stats}, nil
}

// lockRoot makes the backup root and locks it (doc.go: "Take, Restore
// and GC serialise on an flock of the root directory").
func (t *taker) lockRoot() error {
	root := t.root
	// Another Take that made the root and failed removes it, empty, under
	// the lock before it lets go (cleanup): the root locked, or about to
	// be, may be gone then. Sessions of one workdir start side by side, so
	// it is made again and locked again.
	for try := 0; ; try++ {
		if err := mkdirTracked(filepath.Join(root, objectsDir), 0o700, &t.made); err != nil {
			return pathErr("create backup directory", root, err, root)
		}
		unlock, err := lockDir(root)
		if (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE)) && try < 3 {
			continue
		}
		if err != nil {
			return pathErr("lock", root, err, root)
		}
		t.unlock = unlock
		return nil
	}
}

// makeTmpDir checks that the session is new and makes the temp directory
// everything is written under (doc.go: "objects and the manifest are
// written under <root>/.tmp-<session>"). It returns the session
// directory's final name and the root's device (copies clone within it).
func (t *taker) makeTmpDir() (final string, rootDev uint64, err error) {
	root := t.root
	final = filepath.Join(root, t.session)
	if ok, err := exists(final); err != nil {
		return "", 0, pathErr("stat", final, err, root)
	} else if ok {
		return "", 0, &Error{Op: "take", Path: final, Kind: ErrExists, Hint: "pick a new session id, or remove the old snapshot"}
	}
	var rootSt unix.Stat_t
	if err := unix.Stat(root, &rootSt); err != nil {
		return "", 0, pathErr("stat", root, err, root)
	}
	t.tmpDir = filepath.Join(root, ".tmp-"+t.session)
	if err := os.RemoveAll(t.tmpDir); err != nil { // a crashed Take's leftovers
		return "", 0, pathErr("remove", t.tmpDir, err, root)
	}
	if err := os.Mkdir(t.tmpDir, 0o700); err != nil {
		return "", 0, pathErr("create", t.tmpDir, err, root)
	}
	return final, rootSt.Dev, nil
}

// record walks the scopes and the Meta regions and reads their attrs
// (doc.go, "What is recorded"): the manifest without its final entries,
// the scopes' entries, and the Meta entries.
func (t *taker) record() (*Manifest, []Entry, []Entry, error) {
	m := &Manifest{Version: manifestVersion, Session: t.session, Created: time.Now().UTC(), Started: t.start.UTC(), Workdir: t.workdir, Scopes: t.scopes, Exclude: t.exclude, Others: t.others, AgentUID: t.agentUID}
	if t.agent != nil {
		m.AgentGIDs = t.agent.gids
	}
	// The Meta regions are walked beside the scopes: the two walks share
	// nothing but the read-only scopes and agent, and a session waits for
	// the longer of them, not their sum.
	type metaWalk struct {
		entries []Entry
		cut     []string
		err     error
	}
	metaDone := make(chan metaWalk, 1)
	go func() {
		e, cut, err := t.walkMeta()
		metaDone <- metaWalk{e, cut, err}
	}()
	entries, err := t.walk()
	meta := <-metaDone // never left walking behind the caller's back
	if err != nil {
		return nil, nil, nil, err
	}
	if afterWalk != nil {
		afterWalk()
	}
	m.Entries = entries
	metaEntries, cut := meta.entries, meta.cut
	if meta.err != nil {
		return nil, nil, nil, meta.err
	}
	if err := t.fillAttrs(entries, metaEntries); err != nil {
		return nil, nil, nil, err
	}
	m.Meta, m.MetaCut = t.meta, cut
	t.stats.MetaEntries = len(metaEntries)
	return m, entries, metaEntries, nil
}

// hashJob is a file whose content must be read: entries[i].
type hashJob struct {
	i     int
	prior string // hash the index had for this path (hash first, copy only if new)
}

// hashJobs takes each file's hash from the index when its stat matches
// (doc.go: "A file whose (dev, ino, size, mtime, ctime) matches the index
// costs one stat"), and returns the others, with their total size.
func (t *taker) hashJobs(entries []Entry, ix index) (jobs []hashJob, total int64) {
	for i := range entries {
		e := &entries[i]
		if e.Type != TypeFile || e.Link != "" || e.Fixed {
			continue
		}
		t.stats.Files++
		t.stats.Bytes += e.Size
		if h, ok := ix.lookup(e); ok && objectExists(t.root, h) {
			e.Hash = h
			t.stats.IndexHits++
			continue
		}
		j := hashJob{i: i}
		if c, ok := ix[e.Path]; ok && objectExists(t.root, c.Hash) {
			j.prior = c.Hash
		}
		jobs = append(jobs, j)
		total += e.Size
	}
	return jobs, total
}

// copier reads the hash jobs' content into <tmp>/o-<i>, in parallel
// (Options.Workers; doc.go: "Copies run in parallel"), and stops at the
// first error.
type copier struct {
	t       *taker
	entries []Entry
	jobs    []hashJob
	total   int64
	rootDev uint64

	done    atomic.Int64
	mu      sync.Mutex
	lastRep time.Time
	copied  []bool
	gone    []bool // removed by someone else before it was read
	firstE  error
	next    atomic.Int64
	failed  atomic.Bool
	counter struct {
		hashed, copied, reflinked atomic.Int64
		copiedBytes               atomic.Int64
	}
}

// run runs the workers and returns the first error.
func (c *copier) run() error {
	var wg sync.WaitGroup
	for w := 0; w < min(c.t.workers, len(c.jobs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.work()
		}()
	}
	wg.Wait()
	return c.firstE
}

// report calls Options.Progress, at most ten times a second unless final.
func (c *copier) report(final bool) {
	if c.t.progress == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if final || time.Since(c.lastRep) >= 100*time.Millisecond {
		c.lastRep = time.Now()
		c.t.progress(c.done.Load(), c.total)
	}
}

// fail keeps the first error and stops every worker.
func (c *copier) fail(err error) {
	c.mu.Lock()
	if c.firstE == nil {
		c.firstE = err
	}
	c.mu.Unlock()
	c.failed.Store(true)
}

// work is one worker: it takes jobs until none is left or one failed.
func (c *copier) work() {
	for !c.failed.Load() {
		k := int(c.next.Add(1) - 1)
		if k >= len(c.jobs) {
			return
		}
		if err := c.t.ctx.Err(); err != nil {
			c.fail(err)
			return
		}
		j := c.jobs[k]
		if j.prior != "" {
			done, ok := c.hashPrior(j)
			if !ok {
				return
			}
			if done {
				continue
			}
		}
		if !c.copyJob(j) {
			return
		}
	}
}

// hashPrior hashes a file the index knew by another stat: the same
// content as the index's object needs no copy (done). ok is false once
// it failed.
func (c *copier) hashPrior(j hashJob) (done, ok bool) {
	e := &c.entries[j.i]
	// A file removed meanwhile goes on to copyEntry,
	// which says it vanished.
	h, st, err := hashPath(e.Path)
	switch {
	case err == nil:
		c.counter.hashed.Add(1)
		if h == j.prior && st.Ino == e.Ino {
			e.Hash = h
			refresh(e, &st)
			c.done.Add(e.Size)
			c.report(false)
			return true, true
		}
	case e.Other && !errors.Is(err, unix.ENOENT):
		// Unreadable: recorded without content.
		c.done.Add(e.Size)
		return true, true
	case !errors.Is(err, unix.ENOENT):
		c.fail(pathErr("read", e.Path, err, e.Path))
		return false, false
	}
	return false, true
}

// copyJob copies one file's content into its temp object (an Other
// entry's best effort: copyOther); false once it failed.
func (c *copier) copyJob(j hashJob) bool {
	e := &c.entries[j.i]
	var (
		res      copyResult
		vanished bool
		err      error
	)
	if e.Other {
		res, vanished, err = copyOther(e, c.t.objTmp(j.i), c.rootDev, c.t.root)
	} else {
		res, vanished, err = copyEntry(e, c.t.objTmp(j.i), c.rootDev, c.t.root)
	}
	if err != nil {
		c.fail(err)
		return false
	}
	if e.Other && res.hash == "" && !vanished {
		c.done.Add(e.Size) // changing or unreadable: no content
		return true
	}
	if vanished {
		c.gone[j.i] = true
		c.done.Add(e.Size)
		return true
	}
	e.Hash = res.hash
	refresh(e, &res.st)
	c.copied[j.i] = true
	c.counter.copied.Add(1)
	c.counter.copiedBytes.Add(res.data)
	if res.reflinked {
		c.counter.reflinked.Add(1)
	}
	c.done.Add(e.Size)
	c.report(false)
	return true
}

// countCopies adds what the copier did, and the Other entries kept, to
// Stats.
func (t *taker) countCopies(c *copier, kept []Entry) {
	t.stats.Hashed = int(c.counter.hashed.Load())
	t.stats.Copied = int(c.counter.copied.Load())
	t.stats.CopiedBytes = c.counter.copiedBytes.Load()
	t.stats.Reflinked = int(c.counter.reflinked.Load())
	for i := range kept {
		if e := &kept[i]; e.Other {
			t.stats.Others++
			if e.Type == TypeFile && e.Link == "" && e.Hash == "" {
				t.stats.OthersBare++
			}
		}
	}
}

// storeObjects makes the copies durable, then renames each new one into
// the store (doc.go: "flushed (syncfs), objects renamed into the
// store"); content the store has already is dropped. It returns the
// bytes added.
func (t *taker) storeObjects(entries []Entry, copied []bool) (int64, error) {
	root := t.root
	// The copies are durable before they get their final names.
	if t.stats.Copied > 0 {
		if err := syncPath(t.tmpDir); err != nil {
			return 0, pathErr("sync", root, err, root)
		}
	}
	var newBytes int64
	fanout := map[string]bool{}
	for i := range entries {
		if !copied[i] {
			continue
		}
		e := &entries[i]
		tmp, obj := t.objTmp(i), objectPath(root, e.Hash)
		if ok, err := exists(obj); err != nil {
			return 0, pathErr("stat", obj, err, root)
		} else if ok {
			os.Remove(tmp)
			t.stats.Deduped++
			continue
		}
		if dir := filepath.Dir(obj); !fanout[dir] {
			if err := mkdirTracked(dir, 0o700, &t.made); err != nil {
				return 0, pathErr("create", dir, err, root)
			}
			fanout[dir] = true
		}
		if err := os.Rename(tmp, obj); err != nil {
			return 0, pathErr("store object for", e.Path, err, root)
		}
		t.renamed = append(t.renamed, obj)
		newBytes += storedBytes(obj, e)
	}
	return newBytes, nil
}

// storedBytes is what object obj costs the store: e's size, or for a
// file with holes the space its data takes (st_blocks).
func storedBytes(obj string, e *Entry) int64 {
	var st unix.Stat_t
	if !isSparseHash(e.Hash) || unix.Stat(obj, &st) != nil {
		return e.Size
	}
	return min(e.Size, st.Blocks*512)
}

// linkHashes gives hard-link members their leader's content hash (doc.go:
// "hard-link group (members name the group's first path)").
func linkHashes(entries []Entry) {
	byPath := make(map[string]int, len(entries))
	for i := range entries {
		byPath[entries[i].Path] = i
	}
	for i := range entries {
		if e := &entries[i]; e.Link != "" {
			e.Hash = entries[byPath[e.Link]].Hash
		}
	}
}

// writeIndex writes the stat cache's temp: this session's files on top
// of what was there, only those whose ctime and mtime are older than the
// racy window (doc.go: "a write in the same timestamp tick is never
// hidden").
func (t *taker) writeIndex(ix index, entries []Entry) error {
	now := time.Now().UnixNano()
	changed := false
	for i := range entries {
		e := &entries[i]
		if e.Type != TypeFile || e.Link != "" || e.Hash == "" {
			continue
		}
		if now-e.Ctime > racyWindow && now-e.Mtime > racyWindow {
			c := indexEntry{Dev: e.Dev, Ino: e.Ino, Size: e.Size, Mtime: e.Mtime, Ctime: e.Ctime, Hash: e.Hash}
			if old, ok := ix[e.Path]; !ok || old != c {
				ix[e.Path], changed = c, true
			}
		} else if _, ok := ix[e.Path]; ok {
			delete(ix, e.Path)
			changed = true
		}
	}
	if _, ok := indexKeyOf(t.root); ok && !changed {
		// The file holds this index already (a workdir whose files
		// are all as the last backup saw them): not written again.
		return nil
	}
	t.index = ix
	var err error
	if t.indexTmp, err = writeIndexTmp(t.root, ix); err != nil {
		return pathErr("write index", filepath.Join(t.root, indexFile), err, t.root)
	}
	return nil
}

// stage writes the manifest and info under the temporary directory and
// flushes it (doc.go: "objects renamed into the store, flushed again").
func (t *taker) stage(m *Manifest, newBytes int64, final string) error {
	root := t.root
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	// With objects copied, no fsync per file: the syncfs below makes
	// them durable with everything else written for this snapshot (one
	// flush, not three). Without (a workdir the store already holds, or
	// an empty one), the two files and their directory are all there is
	// to flush: three fsyncs, not a syncfs that would wait for every
	// other writer's dirty data on the file system.
	own := t.stats.Copied == 0
	if err := writeFile(filepath.Join(t.tmpDir, manifestFile), data, own); err != nil {
		return pathErr("write manifest", filepath.Join(final, manifestFile), err, root)
	}
	info := infoOf(m, newBytes)
	idata, _ := json.Marshal(info)
	if err := writeFile(filepath.Join(t.tmpDir, infoFile), idata, own); err != nil {
		return pathErr("write", filepath.Join(final, infoFile), err, root)
	}
	// Objects' names, fanout directories and the manifest are durable
	// before the session directory appears under its final name.
	sync := syncPath
	if own {
		sync = dirsync.Sync
	}
	if err := sync(t.tmpDir); err != nil {
		return pathErr("sync", root, err, root)
	}
	return nil
}

// publish renames the staged session directory into place and fsyncs its
// parent (doc.go: "the session directory renamed into place and its
// parent fsynced"); the index goes in with it.
func (t *taker) publish(final string) error {
	root := t.root
	if err := os.Rename(t.tmpDir, final); err != nil {
		return pathErr("commit", final, err, root)
	}
	t.tmpDir = ""
	if t.indexTmp == "" {
		// Unchanged: not rewritten (writeIndex).
	} else if err := os.Rename(t.indexTmp, filepath.Join(root, indexFile)); err != nil {
		// The session is committed; a stale index only costs rehashing.
		os.Remove(t.indexTmp)
	} else {
		indexSeen.stored(root, t.index)
	}
	t.indexTmp = ""
	if err := dirsync.Sync(root); err != nil {
		// Committed but maybe not durable: undo so the caller's refusal is truthful.
		os.RemoveAll(final)
		return pathErr("sync", root, err, root)
	}
	return nil
}

// afterWalk, when set (tests only), runs between the walk and the copies:
// where another process's change to a shared scope lands in a real session.
var afterWalk func()

// copyEntry copies e's file into tmp. The agent has not started while the
// backup is taken, so whatever changes in a scope meanwhile is another
// process's doing, and a shared scope (/tmp) changes all the time: a file
// removed since the walk is reported vanished (nothing to back up: it was
// not there when the agent started), and one replaced by another file
// (an editor's or a package manager's atomic save) is recorded again as
// it now is and copied, up to three times.
func copyEntry(e *Entry, tmp string, dstDev uint64, root string) (res copyResult, vanished bool, err error) {
	for try := 0; ; try++ {
		res, err = copyIn(e.Path, tmp, dstDev, root)
		if errors.Is(err, unix.ENOENT) {
			return res, true, nil
		}
		if err != nil || res.st.Ino == e.Ino {
			return res, false, err
		}
		if try == 2 {
			return res, false, &Error{Op: "copy", Path: e.Path, Kind: ErrChanged, Hint: "it was replaced again and again while the snapshot was taken; stop what keeps replacing it before the session starts"}
		}
		st, err := lstat(e.Path)
		if err != nil {
			return res, false, pathErr("stat", e.Path, err, e.Path)
		}
		if st == nil {
			return res, true, nil
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return res, false, &Error{Op: "copy", Path: e.Path, Kind: ErrChanged, Hint: "it was replaced by something that is not a regular file while the snapshot was taken"}
		}
		ne, err := recordEntry(e.Path, st)
		if err != nil {
			return res, false, err
		}
		if ne.Attrs, err = readAttrs(ne.Path, ne.Type); err != nil {
			return res, false, pathErr("read inode flags of", ne.Path, err, ne.Path)
		}
		ne.Link = e.Link
		*e = ne
	}
}

// copyOther is copyEntry for a file of another session's tree
// (Options.Others): one attempt, never a refusal. A file that vanished is
// reported so; one that changed while it was read, was replaced, or could
// not be read comes back without a hash (recorded without content).
func copyOther(e *Entry, tmp string, dstDev uint64, root string) (res copyResult, vanished bool, err error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	res, changed, err := copyInOnce(e.Path, tmp, dstDev, *bp, root)
	switch {
	case errors.Is(err, unix.ENOENT):
		os.Remove(tmp)
		return copyResult{}, true, nil
	case err != nil || changed || res.st.Ino != e.Ino:
		os.Remove(tmp)
		return copyResult{}, false, nil
	}
	return res, false, nil
}

// pastStart returns once the kernel's coarse clock, which stamps the
// birth time of new files, has passed start: every file made after Take
// returns is then born after Manifest.Started, and Restore can tell them
// from files that existed before by their birth time alone. (It is at
// most one tick, and Take is seldom that fast.)
func pastStart(start time.Time) {
	for i := 0; i < 100; i++ {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil || ts.Nano() > start.UnixNano() {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// dropGone returns entries without the files marked gone (a new slice; the
// objects' temp names follow entries' indexes). A removed file with another
// name in the scope (a hard-link group's leader, whose content its members
// share) cannot be dropped that way: the snapshot refuses, to be taken again.
func dropGone(entries []Entry, gone []bool) ([]Entry, error) {
	removed, otherLeader := map[string]bool{}, map[string]bool{}
	for i := range entries {
		if gone[i] {
			removed[entries[i].Path] = true
			otherLeader[entries[i].Path] = entries[i].Other
		}
	}
	if len(removed) == 0 {
		return entries, nil
	}
	for i := range entries {
		if l := entries[i].Link; l != "" && removed[l] {
			if otherLeader[l] {
				// Another session's file, best effort: its other names
				// are recorded without content.
				entries[i].Link, entries[i].Hash = "", ""
				continue
			}
			return nil, &Error{Op: "copy", Path: l, Kind: ErrChanged, Hint: "it was removed while the snapshot was taken, and another name of the same file is in the scope; start the session again"}
		}
	}
	out := make([]Entry, 0, len(entries)-len(removed))
	for i := range entries {
		if !gone[i] {
			out = append(out, entries[i])
		}
	}
	return out, nil
}

const (
	manifestFile = "manifest.json"
	infoFile     = "info.json"
	journalFile  = "journal"
)

func (t *taker) objTmp(i int) string { return filepath.Join(t.tmpDir, "o-"+strconv.Itoa(i)) }

func objectExists(root, h string) bool {
	if !validHash(h) {
		return false
	}
	var st unix.Stat_t
	return unix.Stat(objectPath(root, h), &st) == nil
}

// refresh updates an entry from the fstat taken when its content was read.
func refresh(e *Entry, st *unix.Stat_t) {
	e.Size = st.Size
	e.Mtime = tsNano(st.Mtim)
	e.Ctime = tsNano(st.Ctim)
	e.Mode = st.Mode & 07777
	e.UID, e.GID = st.Uid, st.Gid
}

// walk records every path of every scope, anchors first; the parts of
// Options.Others inside the scopes after the rest, as Other entries.
func (t *taker) walk() ([]Entry, error) {
	w := &walkState{leaders: map[[2]uint64]string{}}
	other := false // walking an Others tree: best effort
	otherRoots, otherEx := t.otherRoots()
	visit := func(p string, st *unix.Stat_t) (bool, error) {
		down, err := t.visit(w, p, st, other)
		if err != nil && other && t.ctx.Err() == nil {
			return false, nil // another session's: left out, never a refusal
		}
		return down, err
	}
	if err := walkScopes(t.scopes, append(slices.Clone(t.exclude), otherEx...), visit); err != nil {
		return nil, err
	}
	other = true
	if err := walkTolerant(otherRoots, t.exclude, visit); err != nil {
		return nil, err
	}
	return t.withAnchors(w.entries)
}

// walkState is what the walk has recorded so far: the entries, the first
// path of each hard-link group, the paths visited.
type walkState struct {
	entries []Entry
	leaders map[[2]uint64]string
	n       int
}

// otherRoots are the trees of Options.Others to walk as Other entries:
// each one that lies in a scope, and each scope that lies in one; ex is
// what the scopes' own walk leaves to them.
func (t *taker) otherRoots() (roots []Scope, ex []string) {
	for _, o := range t.others {
		if excluded(o, t.exclude) {
			continue
		}
		if in, _ := inScope(t.scopes, o); in {
			roots = append(roots, Scope{Path: o, Tree: true})
			ex = append(ex, o)
			continue
		}
		for _, sc := range t.scopes {
			if excluded(sc.Path, []string{o}) {
				roots = append(roots, sc)
			}
		}
	}
	return roots, ex
}

// visit records one path of the walk (other: in an Others tree).
func (t *taker) visit(w *walkState, p string, st *unix.Stat_t, other bool) (bool, error) {
	if w.n++; w.n&1023 == 0 {
		if err := t.ctx.Err(); err != nil {
			return false, err
		}
	}
	if t.agent != nil {
		pr, err := t.reachAt(parent(p))
		if err != nil {
			return false, err
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		closed := isDir && !t.agent.canEnter(p, st)
		if closed || !t.agent.canChange(p, st, pr) {
			// The agent cannot change it: no content, no xattrs,
			// and Restore leaves it. Below a directory it cannot
			// enter there is nothing it can reach or change; at
			// most it could rename the whole directory (its own
			// directory around another user's), which Restore
			// moves back by inode, no content needed.
			e := entryOf(p, st)
			e.Fixed = true
			e.Closed = closed
			e.Other = other
			w.entries = append(w.entries, e)
			if isDir && !e.Closed {
				t.reach[p] = t.agent.reachOf(p, st, pr)
			}
			return isDir && !e.Closed, nil
		}
		if isDir {
			t.reach[p] = t.agent.reachOf(p, st, pr)
		}
	}
	e, err := recordEntry(p, st)
	if err != nil {
		return false, err
	}
	if e.Type == "" {
		return false, nil
	}
	if e.Type == TypeFile && e.Nlink > 1 {
		k := [2]uint64{e.Dev, e.Ino}
		if l, ok := w.leaders[k]; ok {
			e.Link = l
		} else {
			w.leaders[k] = p
		}
	}
	e.Other = other
	w.entries = append(w.entries, e)
	return true, nil
}

// withAnchors puts the anchors before entries.
func (t *taker) withAnchors(entries []Entry) ([]Entry, error) {
	recorded := make(map[string]bool, len(entries))
	for _, e := range entries {
		recorded[e.Path] = true
	}
	var anchors []Entry
	for _, a := range anchorsOf(t.scopes, t.workdir) {
		if recorded[a] || excluded(a, t.exclude) {
			continue
		}
		st, err := lstat(a)
		if err != nil {
			return nil, pathErr("stat", a, err, a)
		}
		if st == nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		e := entryOf(a, st)
		e.Anchor = true
		anchors = append(anchors, e)
		recorded[a] = true
	}
	return append(anchors, entries...), nil
}

// reachAt is what the agent can do with directory d: from the walk, or,
// for the directories above a scope's root, from their own stats (an
// agent that owns the workdir's parent can rename the workdir).
func (t *taker) reachAt(d string) (reach, error) {
	if r, ok := t.reach[d]; ok {
		return r, nil
	}
	var up reach
	if d != "/" {
		var err error
		if up, err = t.reachAt(parent(d)); err != nil {
			return reach{}, err
		}
	}
	st, err := lstat(d)
	if err != nil {
		return reach{}, pathErr("stat", d, err, d)
	}
	if st == nil {
		return up, nil // removed meanwhile: its children go with it
	}
	r := t.agent.reachOf(d, st, up)
	t.reach[d] = r
	return r, nil
}

// anchorsOf: the parent of every scope root that lies in the workdir.
func anchorsOf(scopes []Scope, workdir string) []string {
	if workdir == "" {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range scopes {
		a := filepath.Dir(s.Path)
		if a == s.Path || seen[a] {
			continue
		}
		if a == workdir || excludedIn(a, workdir) {
			seen[a] = true
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// excludedIn: p is strictly below dir.
func excludedIn(p, dir string) bool { return dir != p && excluded(p, []string{dir}) }

// recordEntry reads one path's metadata.
func recordEntry(p string, st *unix.Stat_t) (Entry, error) {
	e := entryOf(p, st)
	if e.Type == TypeSymlink {
		target, err := os.Readlink(p)
		if errors.Is(err, os.ErrNotExist) {
			return Entry{}, nil // removed since it was listed: not there to back up
		}
		if err != nil {
			return e, pathErr("read symlink", p, err, p)
		}
		e.Target = target
	}
	x, err := xattrsOf(p, st)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return e, pathErr("read xattrs of", p, err, p)
	}
	e.Xattrs = x
	return e, nil
}

// writeFile writes data to a new file p (mode 0600), fsynced when durable.
func writeFile(p string, data []byte, durable bool) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
