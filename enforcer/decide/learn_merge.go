package decide

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/klocklabs/klock/policy"
	"go.yaml.in/yaml/v3"
)

// ErrLearnMerge marks a learned manifest that cannot be merged into the
// one already written (another agent or workdir).
var ErrLearnMerge = errors.New("cannot merge the learned manifests")

// learnedMarker heads the learned intents, once.
const learnedMarker = "# --- learned by klock run --learn: review before use ---"

// learnedHeader opens every learned manifest.
const learnedHeader = "# Manifest learned by klock run --learn: the original manifest plus the\n" +
	"# intents this run needed. Review every learned intent before use; the\n" +
	"# original signature was dropped (it no longer matches): sign it again."

// MergeLearned merges next, the manifest a learning run just learned, into
// prev, the one an earlier run wrote to the same file: next as it is (its
// fields, its header), plus every intent of prev that next lacks, with its
// comment, after next's. A learned intent another intent of the result
// covers (same predicate, a wider pattern: ${workdir}/objects/3f/* under
// ${workdir}/objects/**) is dropped, so the union says each need once.
// Both must be manifests of the same agent and workdir (else
// ErrLearnMerge); the result is checked as Learned checks its own.
func MergeLearned(prev, next []byte) ([]byte, error) {
	pm, err := policy.Parse("previous learned manifest", prev)
	if err != nil {
		return nil, fmt.Errorf("%w: the previous one does not parse: %w", ErrLearnMerge, err)
	}
	nm, err := policy.Parse("learned manifest", next)
	if err != nil {
		return nil, fmt.Errorf("%w: the new one does not parse: %w", ErrLearnMerge, err)
	}
	if pm.Agent.ID != nm.Agent.ID || pm.Workdir != nm.Workdir {
		return nil, fmt.Errorf("%w: the previous one is for agent %q in %q, this run's for %q in %q", ErrLearnMerge, pm.Agent.ID, pm.Workdir, nm.Agent.ID, nm.Workdir)
	}
	_, pseq, err := intentsOf(prev)
	if err != nil {
		return nil, err
	}
	nroot, nseq, err := intentsOf(next)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, n := range nseq.Content {
		if k, ok := intentKey(n); ok {
			have[k] = true
		}
	}
	for _, n := range pseq.Content {
		k, ok := intentKey(n)
		if !ok || have[k] {
			continue
		}
		have[k] = true
		nseq.Content = append(nseq.Content, n)
	}
	dropCovered(nseq)
	markReview(nseq, nm.Workdir, nm.PrivateTmp())
	markLearned(nseq)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(nroot); err != nil {
		return nil, fmt.Errorf("learn: encode: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("learn: encode: %w", err)
	}
	out := buf.Bytes()
	m, err := policy.Parse("learned.yaml", out)
	if err != nil {
		return out, fmt.Errorf("%w: the merge does not parse: %w", ErrLearn, err)
	}
	if _, err := policy.Compile(m); err != nil {
		return out, fmt.Errorf("%w: the merge does not compile: %w", ErrLearn, err)
	}
	return out, nil
}

// intentsOf reads a manifest's root mapping and its intents sequence.
func intentsOf(src []byte) (root, seq *yaml.Node, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrLearnMerge, err)
	}
	root = &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("%w: not a YAML mapping", ErrLearnMerge)
	}
	seq = getKey(root, "intents")
	if seq == nil || seq.Kind != yaml.SequenceNode {
		seq = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		setKey(root, "intents", seq)
	}
	return root, seq, nil
}

// intentOf parses one item of an intents sequence as written (${workdir}
// kept): "PRED OBJECT" or a mapping with predicate and object.
func intentOf(n *yaml.Node) (policy.Intent, bool) {
	var s string
	switch n.Kind {
	case yaml.ScalarNode:
		s = n.Value
	case yaml.MappingNode:
		if p, o := getKey(n, "predicate"), getKey(n, "object"); p != nil && o != nil {
			s = p.Value + " " + o.Value
		}
	}
	in, err := policy.ParseIntent(s)
	return in, err == nil
}

func intentKey(n *yaml.Node) (string, bool) {
	in, ok := intentOf(n)
	if !ok {
		return "", false
	}
	return in.String(), true
}

// isLearned: the item carries a learned intent's comment.
func isLearned(n *yaml.Node) bool {
	c := strings.TrimSpace(strings.TrimPrefix(n.LineComment, "#"))
	return strings.HasPrefix(c, "learned") || strings.HasPrefix(c, "widened")
}

// dropCovered removes each learned item whose intent another item's
// covers: same predicate and object type, a pattern that covers all of its
// pattern. What the operator wrote is never dropped.
func dropCovered(seq *yaml.Node) {
	ins := make([]policy.Intent, len(seq.Content))
	ok := make([]bool, len(seq.Content))
	for i, n := range seq.Content {
		ins[i], ok[i] = intentOf(n)
	}
	kept := seq.Content[:0]
	for i, n := range seq.Content {
		covered := false
		for j := range seq.Content {
			if i != j && ok[i] && ok[j] && isLearned(n) && intentCovers(ins[j], ins[i]) {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, n)
		}
	}
	seq.Content = kept
}

// intentCovers: a allows everything b does, and more (FILE and PROC
// patterns; other objects only equal, which the merge already dedups).
func intentCovers(a, b policy.Intent) bool {
	if a.Predicate != b.Predicate || a.Object.Type != b.Object.Type || (a.Object.Type != policy.ObjFile && a.Object.Type != policy.ObjProc) {
		return false
	}
	pa, pb := a.Object.Path, b.Object.Path
	if pa == pb {
		return false
	}
	switch pa.Match {
	case policy.MatchSubtree:
		return pa.Covers(pb.Path)
	case policy.MatchChildren:
		return pb.Match == policy.MatchExact && pa.Covers(pb.Path)
	}
	return false
}

// markLearned puts the learned marker on the first learned item, and only
// there (a manifest learned again from a learned one would have two).
func markLearned(seq *yaml.Node) {
	first := true
	for _, n := range seq.Content {
		n.HeadComment = dropLine(n.HeadComment, learnedMarker)
		if first && isLearned(n) {
			first = false
			if n.HeadComment == "" {
				n.HeadComment = learnedMarker
			} else {
				n.HeadComment = learnedMarker + "\n" + n.HeadComment
			}
		}
	}
}

func dropLine(s, line string) string {
	if s == "" {
		return s
	}
	var kept []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != line {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// withoutHeader removes the header of an earlier learning run from a
// manifest's head comment (the manifest it learned from was itself
// learned), keeping the operator's comments below it.
func withoutHeader(head string) string {
	if !strings.HasPrefix(head, learnedHeader) {
		return head
	}
	if _, rest, ok := strings.Cut(head, "\n#\n"); ok {
		return rest
	}
	return ""
}

// CountLearned is how many intents of the manifest out declares beyond m's
// (what a learning run adds to the manifest it ran under), for klock run's
// summary.
func CountLearned(m *policy.Manifest, out []byte) (int, error) {
	lm, err := policy.Parse("learned.yaml", out)
	if err != nil {
		return 0, fmt.Errorf("%w: it does not parse: %w", ErrLearn, err)
	}
	have := map[string]bool{}
	for _, in := range m.Intents {
		have[in.String()] = true
	}
	n := 0
	for _, in := range lm.Intents {
		if !have[in.String()] {
			n++
		}
	}
	return n, nil
}

// LearnedIntents is how many intents of a manifest carry a learned
// comment: all the learning runs merged into it have added.
func LearnedIntents(out []byte) (int, error) {
	_, seq, err := intentsOf(out)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range seq.Content {
		if isLearned(it) {
			n++
		}
	}
	return n, nil
}
