//go:build linux

package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/snapshot"
)

// PrivateTmpRoot holds the sessions' private /tmp and /var/tmp
// directories: <root>/<session>/tmp and <root>/<session>/vartmp.
const PrivateTmpRoot = policy.PrivateTmpRoot

// privateTmp is a session's own /tmp and /var/tmp (policy.Manifest.PrivateTmp):
// two directories klock makes for it, which stage 2 bind-mounts over the
// agent's /tmp and /var/tmp. Nothing outside the session reaches them
// (their parent is root's, 0700), so the intents there lease nothing and
// back nothing up: they start empty.
type privateTmp struct {
	dir   string        // <PrivateTmpRoot>/<session>
	binds []launch.Bind // host directory over the agent's
}

// usesPrivateTmp says whether a session of o gets a private /tmp: not a
// container's (its runtime gave it a /tmp of its own), and not one whose
// workdir or start directory is in the host's /tmp (the agent must see
// it; policy.Manifest.PrivateTmp).
func usesPrivateTmp(o Options) bool {
	return o.Container == nil && o.Manifest.PrivateTmp() && !(o.Dir != "" && policy.InTmp(filepath.Clean(o.Dir)))
}

// makePrivateTmp makes the session's directories. The leaves are the
// agent's, mode 01777 (sticky, world-writable): the mode every program
// expects of /tmp (some check it before they put a socket there), as
// systemd's PrivateTmp= makes it; the root-owned 0700 parent keeps every
// other user of the host out, whatever the leaves' mode.
func makePrivateTmp(id string, uid, gid uint32) (*privateTmp, error) {
	if id == "" || id == "." || id == ".." || filepath.Base(id) != id {
		return nil, fmt.Errorf("%w: session id %q cannot name its private /tmp", ErrSetup, id)
	}
	if err := os.MkdirAll(PrivateTmpRoot, 0o700); err != nil {
		return nil, fmt.Errorf("%w: private /tmp: %v", ErrSetup, err)
	}
	if err := os.Chmod(PrivateTmpRoot, 0o700); err != nil {
		return nil, fmt.Errorf("%w: private /tmp: %v", ErrSetup, err)
	}
	p := &privateTmp{dir: filepath.Join(PrivateTmpRoot, id)}
	if err := os.Mkdir(p.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: private /tmp: %v", ErrSetup, err)
	}
	for _, d := range policy.TmpDirs {
		host := p.hostDir(d)
		err := os.Mkdir(host, 0o700)
		if err == nil {
			err = os.Chown(host, int(uid), int(gid))
		}
		if err == nil {
			err = os.Chmod(host, os.ModeSticky|0o777)
		}
		if err != nil {
			_ = os.RemoveAll(p.dir)
			return nil, fmt.Errorf("%w: private %s: %v", ErrSetup, d, err)
		}
		p.binds = append(p.binds, launch.Bind{Src: host, Dst: d})
	}
	return p, nil
}

// hostDir is where the agent's d (/tmp or /var/tmp) is on the host.
func (p *privateTmp) hostDir(d string) string {
	if d == "/var/tmp" {
		return filepath.Join(p.dir, "vartmp")
	}
	return filepath.Join(p.dir, "tmp")
}

// withoutTmp is m without its FILE and PROC intents in the private /tmp:
// what the session leases is the rest (nothing another session can reach
// is leased).
func withoutTmp(m *policy.Manifest) *policy.Manifest {
	h := *m
	h.Intents = nil
	for _, in := range m.Intents {
		if (in.Object.Type == policy.ObjFile || in.Object.Type == policy.ObjProc) && policy.InTmp(in.Object.Path.Path) {
			continue
		}
		h.Intents = append(h.Intents, in)
	}
	return &h
}

// dropTmpScopes drops the rollback roots in the private /tmp: the host's
// backup holds nothing of it (privateTmp.empty empties it instead). nil
// (everything the backup holds) stays nil.
func dropTmpScopes(in []snapshot.Scope) []snapshot.Scope {
	if in == nil {
		return nil
	}
	out := []snapshot.Scope{}
	for _, s := range in {
		if !policy.InTmp(s.Path) {
			out = append(out, s)
		}
	}
	return out
}

func dropTmpPaths(in []string) []string {
	var out []string
	for _, p := range in {
		if !policy.InTmp(p) {
			out = append(out, p)
		}
	}
	return out
}

// empty is the rollback of the private /tmp: it started empty, so
// everything in it is removed, each as one entry of the log's rollback
// (named as the agent saw it).
func (p *privateTmp) empty() []vlog.RollbackOp {
	var ops []vlog.RollbackOp
	for _, b := range p.binds {
		ents, err := os.ReadDir(b.Src)
		if err != nil {
			ops = append(ops, vlog.RollbackOp{Path: b.Dst, Action: "removed", Error: err.Error(), Why: p.why(b)})
			continue
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		for _, e := range ents {
			// RemoveAll never follows a link the agent left there.
			err := os.RemoveAll(filepath.Join(b.Src, e.Name()))
			op := vlog.RollbackOp{Path: filepath.Join(b.Dst, e.Name()), Action: "removed", OK: err == nil, Why: p.why(b)}
			if err != nil {
				op.Error = err.Error()
			}
			ops = append(ops, op)
		}
	}
	return ops
}

func (p *privateTmp) why(b launch.Bind) string {
	return fmt.Sprintf("private %s (host path %s), which started empty", b.Dst, b.Src)
}

// remove deletes the session's directories (the session's end without
// Options.KeepTmp).
func (p *privateTmp) remove() error {
	err := os.RemoveAll(p.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// backend is the verification log's entry for it.
func (p *privateTmp) backend(kept bool) vlog.Backend {
	be := vlog.Backend{Name: "private /tmp", Guarantee: vlog.GuaranteeBlocks}
	for _, b := range p.binds {
		be.Details = append(be.Details, fmt.Sprintf("private %s (host path %s): the session's own, bind-mounted over the agent's %s; the host's is out of the agent's reach", b.Dst, b.Src, b.Dst))
	}
	be.Details = append(be.Details, "intents in /tmp and /var/tmp name the private directories: no lease, nothing backed up (they start empty; a rollback empties them)")
	if kept {
		be.Details = append(be.Details, "kept after the session (--keep-tmp): remove "+p.dir+" when done with it")
	} else {
		be.Details = append(be.Details, "removed at the session's end (klock run --keep-tmp keeps it)")
	}
	return be
}

// bindList is what stage 2 mounts (nil without a private /tmp).
func (p *privateTmp) bindList() []launch.Bind {
	if p == nil {
		return nil
	}
	return p.binds
}

// privateTmpGate grants a permissive amendment in the private /tmp without
// a lease (no other session reaches it) and without a backup (it started
// empty); any other amendment asks gate.
func privateTmpGate(gate decide.AmendGate) decide.AmendGate {
	return func(r decide.AmendRequest) decide.AmendAnswer {
		if r.Triple.Type == policy.ObjFile && policy.InTmp(r.Triple.Path) {
			return decide.AmendAnswer{Granted: true}
		}
		return gate(r)
	}
}

// agentView names ev's objects as the agent sees them when a backend
// named them at the private directories' host paths: bpf-lsm's time and
// xattr hooks see a dentry but no mount, and name it through the mount
// the session last reached its file system by, which for the private
// /tmp (a bind of a directory of the host's root file system) can be the
// root's (lsm's doc). No-op without a private /tmp.
func (p *privateTmp) agentView(ev *event.Event) {
	if p == nil {
		return
	}
	ev.Triple.Path = p.agentPath(ev.Triple.Path)
	ev.Extra.Path = p.agentPath(ev.Extra.Path)
}

// agentPath is host path h as the agent names it (h itself when it is not
// in the private directories).
func (p *privateTmp) agentPath(h string) string {
	for _, b := range p.binds {
		if h == b.Src {
			return b.Dst
		}
		if rest, ok := strings.CutPrefix(h, b.Src+"/"); ok {
			return b.Dst + "/" + rest
		}
	}
	return h
}
