package decide

import (
	"strings"

	"github.com/klocklabs/klock/policy"
)

// workdirReads declares the run's reads inside the workdir on the whole
// workdir (CONSUMES FILE:${workdir}/**) rather than file by file.
//
// The files a run reads in its workdir are its input: the next run reads
// the next input (a new test file, another package tarball, a new source
// file), and a manifest that names this run's files kills that run at its
// first new one (pytest's tests/test_more.py, npm's greet-2.3.0.tgz). The
// workdir is the agent's own tree, and reading it is what the agent is
// for; what it may change there stays as learned, exact or on the scopes
// of its own files.
func workdirReads(need []learnObs, workdir string) {
	wd := strings.TrimSuffix(workdir, "/")
	if wd == "" {
		return
	}
	all := policy.PathPattern{Path: wd, Match: policy.MatchSubtree}
	for i := range need {
		o := &need[i]
		p := o.t.Path
		if o.t.Type != policy.ObjFile || (o.t.Predicate != policy.Consumes && o.t.Predicate != policy.DependsOn) ||
			!(p == wd || strings.HasPrefix(p, wd+"/")) {
			continue
		}
		o.scope = all
		o.note = "learned: reads of the workdir, the agent's own tree, declared on all of it (the next run's input is other files: new sources, tests, packages); "
	}
}
