// Package decide owns the decision between what the kernel backends report
// (event.Event, event.Lost) and what the session does about it: allow,
// record a blocked violation, kill the session and roll back (strict), or
// amend the scope with a lease (permissive, Dynamic Lease Acquisition,
// KLIS-6 §3.2). It also keeps the session's records (observed triples
// deduplicated and counted, intent use counts, violations, amendments, lost
// events, files the session created) for the verification log, and writes
// the manifest that would have allowed the run (--learn).
//
// It never acts: it does not kill, roll back, load rules into the kernel or
// print. It returns a Verdict and the caller (the session) carries it out.
// It has no kernel code and no syscalls; it is safe for concurrent use by
// several backends.
//
// Decisions (see Engine.Observe):
//   - Strict: the first triple outside the scope yields ActionKill, whether
//     or not the kernel already blocked it. KLIS-6 defines Observed Intent as
//     the side effects *attempted*, and §3.2 terminates a strict session on
//     any violation: an agent that probes a wall is exactly the agent strict
//     mode exists to stop. Verdict.Blocked says whether the effect was
//     prevented (rollback then has nothing of this operation to undo, but
//     still restores what earlier allowed operations changed, §3.3).
//     Events after the first kill verdict are still decided and recorded;
//     their violations return ActionKill again (killing a cgroup twice is
//     harmless) with Verdict.First false.
//   - Permissive: a violation amends the scope with an exact lease intent
//     (Origin "lease") via Ruleset.With, so the same operation is allowed
//     next time; the verdict is ActionAmended, or ActionBlocked when a kernel
//     wall already refused the attempt (walls such as Landlock cannot be
//     widened at run time; the lease still records the need for --learn).
//     With WithAmendGate an amendment is made only when the gate grants it
//     (KLIS-6 §3: "if no conflict exists"); LeaseGate is the gate of a
//     session that holds leases: it acquires the amendment's exact intent
//     as the session's lease, never waiting, and backs up what a granted
//     amendment lets a refused operation change on its retry before it is
//     granted. Not granted, the verdict is ActionLeaseDenied: no
//     amendment, the violation names the conflicting lease, its holder and
//     object (Violation.LeaseError, Conflicts), and a refused operation
//     stays refused.
//   - Lost events: strict returns ActionKill with a reason (fail closed: an
//     unseen operation may have been a violation); permissive records them
//     and returns ActionAllow.
//   - Files the session created (a successful open(O_CREAT)/creat, mknod,
//     mkdir or symlink allowed as PROVIDES) may afterwards be CONSUMED,
//     MUTATED, DELETED and RENAMED by the session without another intent.
//     Rationale: PROVIDES does not imply MUTATES so that an agent cannot
//     overwrite a pre-existing file it was only allowed to create next to;
//     a file the session made itself has no pre-session state to protect
//     (rollback removes it), and "create build/out.o, then write it" is the
//     ordinary meaning of PROVIDES. Hard links are never creations (a link
//     to a CONSUMES-only inode must not become writable), a rename moves the
//     status to its destination and clears whatever it replaced, and PROC
//     objects never benefit (executing a file the agent wrote needs a
//     declared PROC intent). See created.go.
//   - A file is its inode, not its name: a hard link or rename whose new
//     name carries a content right (CONSUMES, MUTATES, DEPENDS_ON, running
//     it) that the file's existing name lacks is a violation on the
//     existing name, its Via naming the new one (Landlock's REFER rule
//     applied to the manifest, for walls widened past the declaration).
//     Judged when the operation took effect or a wall refused it; a file
//     the session made is exempt. See refer.go.
//
// Learning (Learned, learn*.go): the manifest that would have allowed the
// run, written for the wall of the strict run it is for and for the next
// run, whose input differs, without widening past the evidence:
//   - the run's own files (names it chose) on the directory that existed
//     before it (learn_own.go); reads of the workdir on all of it;
//   - file families (learn_family.go, one table): SQLite's -wal, -shm and
//     -journal of a database the run opened (made, changed, removed, and
//     the database changed when written), lock files the run made (X.lock,
//     .X.lock, X.lck: made, changed, removed), both on their exact names
//     (they replace the directory pattern of a temporary file of the
//     run: the names are stable), atomic-write temporaries
//     renamed over a file (X.tmp exact; X.tmp.<digits>, .X.<random> on the
//     directory's children), numbered temporary directories (pytest-<N>,
//     tmpXXXXXXXX: the parent's subtree, with the rotation's removals and
//     renames). A run shows one moment of their life; the next finds what
//     a killed run left (a WAL to change). Paths a family implies never
//     count towards collapsing a directory, and none is declared on a home
//     directory itself or in the system's trees;
//   - a private /tmp (policy.Manifest.PrivateTmp; learn_tmp.go): every
//     predicate the run used in /tmp and /var/tmp, on ${tmpdir}/** and
//     /var/tmp/** (no variable names the private /var/tmp), and nothing it
//     only implies there. The directories are the session's own and start
//     empty; with tmp: host they are the host's and learned as any other
//     path;
//   - review (learn_review.go): each learned wildcard outside the workdir
//     and the private /tmp is commented "# klock review:" in the file and
//     listed by ReviewLearned for klock run's summary, the host's /tmp as
//     host-wide;
//   - --learn over several runs (MergeLearned) unites them: every intent
//     either run learned, a narrower learned one dropped where another
//     covers it; a family one run showed stays when the other did not.
//
// Error semantics: Observe and Lost never fail; a triple the ruleset cannot
// judge (zero type, relative path) is a violation (fail closed). Learned
// returns an error when the manifest is nil or when its own output does not
// parse, compile or cover every learned triple (a bug, never silently
// ignored).
package decide
