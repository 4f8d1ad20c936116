package decide

import (
	"strings"

	"github.com/klocklabs/klock/policy"
	"go.yaml.in/yaml/v3"
)

// The review list. A learned wildcard (dir/*, dir/**) grants what the run
// did on every file there, today's and tomorrow's. In the workdir (the
// agent's own tree) and in a private /tmp (the session's own, empty at
// its start) that is the point; anywhere else it reaches files the agent
// did not touch, so each such intent is flagged for the operator: a
// comment above it in the learned file, and a line in klock run --learn's
// summary (ReviewLearned).

// reviewPrefix starts the comment above a learned wildcard to review.
const reviewPrefix = "# klock review: "

// ReviewItem is one learned wildcard object outside the workdir and the
// private /tmp, with every predicate learned on it.
type ReviewItem struct {
	Object     string   // as written, e.g. FILE:/home/dev/.codex/*
	Predicates []string // in the order the file declares them
	// HostTmp: the object is in the host's /tmp or /var/tmp (tmp: host),
	// shared with every process of the host.
	HostTmp bool
}

// Review is what a learned manifest asks the operator to look at.
type Review struct {
	Wildcards []ReviewItem
	// PrivateVarTmp: learned intents on the private /var/tmp, written
	// /var/tmp/... (no variable names it; ${tmpdir} is /tmp).
	PrivateVarTmp bool
}

// ReviewLearned lists the learned wildcards of out (a learned manifest,
// as written to --learn's file) that reach outside the workdir and the
// private /tmp.
func ReviewLearned(out []byte) (Review, error) {
	m, err := policy.Parse("learned.yaml", out)
	if err != nil {
		return Review{}, err
	}
	_, seq, err := intentsOf(out)
	if err != nil {
		return Review{}, err
	}
	var r Review
	at := map[string]int{}
	for _, n := range seq.Content {
		in, ok := intentOf(n)
		if !ok || !isLearned(n) {
			continue
		}
		if m.PrivateTmp() && isFileOrProc(in) && tmpRoot(in.Object.Path.Path) == "/var/tmp" && policy.InTmp(in.Object.Path.Path) {
			r.PrivateVarTmp = true
		}
		review, hostTmp := toReview(in, m.Workdir, m.PrivateTmp())
		if !review {
			continue
		}
		obj := in.Object.String()
		i, seen := at[obj]
		if !seen {
			i = len(r.Wildcards)
			at[obj] = i
			r.Wildcards = append(r.Wildcards, ReviewItem{Object: obj, HostTmp: hostTmp})
		}
		r.Wildcards[i].Predicates = append(r.Wildcards[i].Predicates, in.Predicate.String())
	}
	return r, nil
}

func isFileOrProc(in policy.Intent) bool {
	return in.Object.Type == policy.ObjFile || in.Object.Type == policy.ObjProc
}

// toReview: in is a wildcard outside the workdir and the private /tmp;
// hostTmp when it is in the host's /tmp.
func toReview(in policy.Intent, workdir string, privateTmp bool) (review, hostTmp bool) {
	pat := in.Object.Path
	if !isFileOrProc(in) || pat.Match == policy.MatchExact {
		return false, false
	}
	if strings.HasPrefix(pat.Path, policy.WorkdirVar) || inWorkdir(pat.Path, workdir) {
		return false, false
	}
	if policy.InTmp(pat.Path) {
		return !privateTmp, !privateTmp
	}
	return true, false
}

// markReview puts the review comment above every learned wildcard of seq
// that toReview flags, and only there (a merge recomputes it).
func markReview(seq *yaml.Node, workdir string, privateTmp bool) {
	for _, n := range seq.Content {
		n.HeadComment = dropPrefixed(n.HeadComment, reviewPrefix)
		in, ok := intentOf(n)
		if !ok || !isLearned(n) {
			continue
		}
		review, hostTmp := toReview(in, workdir, privateTmp)
		if !review {
			continue
		}
		c := reviewPrefix + "a wildcard outside the workdir and the private /tmp: it reaches files the run did not touch"
		if hostTmp {
			c = reviewPrefix + "host-wide: the host's " + tmpRoot(in.Object.Path.Path) + " (tmp: host), shared with every process of the host"
		}
		if n.HeadComment == "" {
			n.HeadComment = c
		} else {
			n.HeadComment += "\n" + c
		}
	}
}

// dropPrefixed removes the lines of a comment that start with prefix.
func dropPrefixed(s, prefix string) string {
	if s == "" {
		return s
	}
	var kept []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), strings.TrimSpace(prefix)) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}
