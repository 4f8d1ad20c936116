package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/policy"
)

// LandlockPlan is the Landlock ruleset compiled from a policy.Ruleset for
// one ABI: what the kernel will enforce, and how that differs from what was
// declared (Residuals).
type LandlockPlan struct {
	// ABI is the Landlock ABI version the kernel reported and the ruleset
	// was built for. It is never higher than what the kernel supports.
	ABI        int       `json:"abi"`
	HandledFS  FSRights  `json:"handled_fs"`
	HandledNet NetRights `json:"handled_net"`
	// Scoped is the LANDLOCK_SCOPE_* set (signal, abstract unix socket).
	Scoped    uint64     `json:"scoped"`
	Rules     []WallRule `json:"rules"`
	Ports     []PortRule `json:"ports,omitempty"`
	Residuals []Residual `json:"residuals"`
	// MemfdNoexec is true when the new pid namespace's vm.memfd_noexec is
	// set to 2 (memfds can never be executed); false when the kernel lacks
	// the sysctl (then memfd exec is a residual).
	MemfdNoexec bool `json:"memfd_noexec"`
}

// WallRule is one path-beneath rule: Rights on Path and, when Dir, on
// everything beneath it.
type WallRule = stage2.WallRule

// PortRule is one Landlock TCP port rule.
type PortRule = stage2.PortRule

// Wall is what stage 2 enforces of the plan (the residuals stay here).
func (p *LandlockPlan) Wall() *stage2.Wall { return p.wall() }

// wall is what stage 2 enforces of the plan (the residuals stay here).
func (p *LandlockPlan) wall() *stage2.Wall {
	if p == nil {
		return nil
	}
	return &stage2.Wall{ABI: p.ABI, HandledFS: p.HandledFS, HandledNet: p.HandledNet, Scoped: p.Scoped,
		Rules: p.Rules, Ports: p.Ports, MemfdNoexec: p.MemfdNoexec}
}

// maxPortRange bounds how many single-port rules one NET range may become;
// a wider range leaves that right unhandled (a residual) instead.
const maxPortRange = 1024

// PlanLandlock compiles rs into Landlock rules for ABI abi (>= 1), looking
// at the file system as it is now: rules attach to existing files, so a
// path's existence and type decide where its rule goes. It fails with
// ErrUnexpressible when the nearest expressible scope for a write right
// would be the whole file system.
func PlanLandlock(rs *policy.Ruleset, abi int) (*LandlockPlan, error) {
	return PlanLandlockOn(rs, abi, hostFS{})
}

// PlanFS is the file system a plan looks at: the host's, or a container's
// as its mounts will show it (the rules are then the container's paths,
// which stage 2 opens inside it).
type PlanFS interface {
	Stat(path string) (fs.FileInfo, error)
	Lstat(path string) (fs.FileInfo, error)
	EvalSymlinks(path string) (string, error)
}

type hostFS struct{}

func (hostFS) Stat(p string) (fs.FileInfo, error)  { return os.Stat(p) }
func (hostFS) Lstat(p string) (fs.FileInfo, error) { return os.Lstat(p) }
func (hostFS) EvalSymlinks(p string) (string, error) {
	return filepath.EvalSymlinks(p)
}

// BoundFS is the host's file system as the agent will see it once binds
// are mounted (Spec.Binds): a path under a bind's Dst is looked at under
// its Src (the private /tmp klock made, not the host's /tmp), and named
// back at Dst. With no binds it is the host's.
func BoundFS(binds []Bind) PlanFS {
	if len(binds) == 0 {
		return hostFS{}
	}
	return boundFS(binds)
}

type boundFS []Bind

// move maps p from under one of the binds' from to under its to.
func (b boundFS) move(p string, back bool) string {
	for _, m := range b {
		from, to := m.Dst, m.Src
		if back {
			from, to = to, from
		}
		if p == from {
			return to
		}
		if rest, ok := strings.CutPrefix(p, from+"/"); ok {
			return to + "/" + rest
		}
	}
	return p
}

func (b boundFS) Stat(p string) (fs.FileInfo, error)  { return os.Stat(b.move(p, false)) }
func (b boundFS) Lstat(p string) (fs.FileInfo, error) { return os.Lstat(b.move(p, false)) }
func (b boundFS) EvalSymlinks(p string) (string, error) {
	r, err := filepath.EvalSymlinks(b.move(p, false))
	if err != nil {
		return "", err
	}
	return b.move(r, true), nil
}

// PlanLandlockOn is PlanLandlock looking at fsys.
func PlanLandlockOn(rs *policy.Ruleset, abi int, fsys PlanFS) (*LandlockPlan, error) {
	if abi < 1 {
		return nil, fmt.Errorf("%w: ABI %d", ErrNoLandlock, abi)
	}
	p := &planner{
		rs:    rs,
		links: rs.Links(),
		kinds: map[string]fs.FileMode{},
		plan:  &LandlockPlan{ABI: abi, HandledFS: handledFS(abi), Scoped: scopedAt(abi)},
		rules: map[string]*WallRule{},
		fs:    fsys,
	}
	for _, r := range rs.Files {
		if err := p.place(r, rightsFor(r.Grants), "FILE"); err != nil {
			return nil, err
		}
	}
	for _, r := range rs.Exec {
		if err := p.place(r, execRights, "PROC"); err != nil {
			return nil, err
		}
	}
	p.interpreters(rs.Interpreters)
	p.settle()
	p.network(rs)
	p.globals()
	p.plan.MemfdNoexec = MemfdNoexecSupported()
	if !p.plan.MemfdNoexec {
		p.residual(Residual{Kind: Unmediated, Reason: "exec of a memfd (memfd_create + execveat) is not seen by Landlock and this kernel lacks vm.memfd_noexec"})
	}
	for _, w := range p.rules {
		p.plan.Rules = append(p.plan.Rules, *w)
	}
	sort.Slice(p.plan.Rules, func(i, j int) bool { return p.plan.Rules[i].Path < p.plan.Rules[j].Path })
	return p.plan, nil
}

type planner struct {
	fs    PlanFS
	rs    *policy.Ruleset
	links map[string]string      // rs.Links()
	kinds map[string]fs.FileMode // linkOnPath's memory: the type of each path looked at (^0: absent)
	plan  *LandlockPlan
	rules map[string]*WallRule
}

func (p *planner) residual(r Residual) { p.plan.Residuals = append(p.plan.Residuals, r) }

func (p *planner) add(path string, r FSRights, dir bool) {
	r &= p.plan.HandledFS
	if !dir {
		r &= fileClass
	}
	if r == 0 {
		return
	}
	if w := p.rules[path]; w != nil {
		w.Rights |= r
		return
	}
	p.rules[path] = &WallRule{Path: path, Rights: r, Dir: dir}
}

// place puts the rights of one declared rule on the nearest expressible
// scope and records every difference.
func (p *planner) place(rule policy.PathRule, r FSRights, typ string) error {
	r &= p.plan.HandledFS
	pat := rule.Pattern
	obj := typ + ":" + pat.String()
	res := func(kind ResidualKind, wall string, rights FSRights, format string, args ...any) {
		p.residual(Residual{Kind: kind, Object: obj, Wall: wall, Rights: rights & p.plan.HandledFS, Reason: fmt.Sprintf(format, args...), Intents: rule.Intents})
	}
	if r == 0 {
		return nil
	}
	if isProcSelf(pat.Path) {
		p.add("/proc", r&^writeClass, true)
		res(Widened, "/proc", r&^writeClass, "/proc/self names a different directory in every process; walled as the session's own /proc (a fresh procfs showing only session processes)")
		if r&writeClass != 0 {
			res(Narrowed, "", r&writeClass, "write rights under /proc/self are not granted")
		}
		return nil
	}
	if link := p.linkOnPath(pat.Path); link != "" {
		// A rule opens its path, following links: through one the agent
		// planted it would wall in whatever the link points at.
		if t, ok := p.links[pat.Path]; ok {
			res(Widened, "", 0, "%s goes through the link %s, which root made: walled at its target %s (a rule of its own)", pat.Path, link, t)
			return nil
		}
		res(Narrowed, "", r, "%s goes through the link %s, which klock does not follow (the agent, or anyone but root, could have made it): nothing is granted through it; declare the target", pat.Path, link)
		return nil
	}
	provides := rule.Grants.Has(policy.Provides) && typ == "FILE"
	if provides && !rule.Grants.Has(policy.Mutates) {
		defer func() {
			res(Widened, "", rWrite|rTruncate, "PROVIDES needs WRITE_FILE and TRUNCATE so created files can be filled; files that already exist there are writable too (overwriting one is MUTATES)")
		}()
	}
	if provides && !rule.Grants.Has(policy.Consumes) && !rule.Grants.Has(policy.DependsOn) {
		defer func() {
			res(Widened, "", rRead, "PROVIDES needs READ_FILE so a file made for reading and writing (O_RDWR, O_TMPFILE: SQLite, tempfile) can be read back; files that already exist there are readable too (reading one is CONSUMES, detected)")
		}()
	}
	if rule.Grants.Has(policy.Renames) && !rule.Grants.Has(policy.Deletes) {
		defer func() {
			res(Widened, "", rRemoveFile|rRemoveDir, "Landlock checks the source of a rename as a removal: RENAMES needs REMOVE_FILE and REMOVE_DIR, so unlink and rmdir (DELETES) are allowed there too")
		}()
	}
	info, err := p.fs.Stat(pat.Path)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("landlock: %s: %w", obj, err)
	case err != nil: // missing
		// A rule attaches to an existing inode, so the rights go on the
		// nearest existing directory above when the agent may make the
		// path during the session (git's .git/, a build's out/): it must
		// then be allowed what was declared there. The wall is wider than the
		// declaration there; the observer decides each operation against
		// the declared pattern (detects, kills and rolls back).
		if r&rMake == 0 && !p.rs.Allows(policy.FileTriple(policy.Provides, pat.Path)).Allowed {
			res(Narrowed, "", r, "%s does not exist at launch and nothing declared lets the agent make it; Landlock rules attach to existing files, so nothing is granted (if someone else makes it during the session, access to it is denied)", pat.Path)
			return nil
		}
		target := pat.Path
		if pat.Match == policy.MatchExact {
			target = filepath.Dir(pat.Path)
		}
		anc, err := nearestDir(p.fs, target)
		if err != nil {
			return fmt.Errorf("landlock: %s: %w", obj, err)
		}
		if anc == "/" && r&writeClass == 0 {
			res(Narrowed, "", r, "%s does not exist at launch and its nearest existing directory is /: granting these rights on the whole file system is not done, so nothing is granted (create a parent directory before launch)", pat.Path)
			return nil
		}
		if err := refuseRoot(obj, anc, r, "create the parent directory before launch or declare a narrower path"); err != nil {
			return err
		}
		p.add(anc, r, true)
		res(Widened, anc, r, "%s does not exist at launch; walled at the nearest existing directory %s, so everything below %s gets these rights and the observer decides each operation there against %s (detects, kills and rolls back)", pat.Path, anc, anc, pat)
		return nil
	case info.IsDir() && pat.Match != policy.MatchExact:
		p.add(pat.Path, r, true)
		if pat.Match == policy.MatchChildren {
			res(Widened, pat.Path, r, "a Landlock rule covers a whole hierarchy: %s is walled as %s/** (deeper paths and the directory itself get the same rights)", obj, strings.TrimSuffix(pat.Path, "/"))
		}
		// Removing or renaming the directory itself is an operation on its
		// parent, granted only where policy.RootRemovable says so.
		self := r & (rRemoveDir | rRefer)
		if self&rRemoveDir == 0 || pat.Match != policy.MatchSubtree {
			return nil
		}
		if !p.rs.RootRemovable(pat) {
			res(Narrowed, "", self, "removing or renaming %s itself is a right on its parent %s, which Landlock would grant over that parent's whole hierarchy, outside the workdir: not granted, so %s stays while everything below it may go", pat.Path, filepath.Dir(pat.Path), pat.Path)
			return nil
		}
		return p.parent(obj, pat.Path, self, res)
	case info.IsDir(): // an exact directory
		if r&rReadDir != 0 {
			p.add(pat.Path, rReadDir, true)
			res(Widened, pat.Path, rReadDir, "an exact directory can only be walled as a hierarchy: every directory below %s can be listed too", pat.Path)
		}
		if rest := r & fileClass &^ rRead; rest != 0 {
			res(Narrowed, "", rest, "file rights on the directory %s itself mean nothing to Landlock (its metadata is unmediated)", pat.Path)
		}
		if self := r & (rMake | rRemoveDir | rRefer); self != 0 {
			return p.parent(obj, pat.Path, self, res)
		}
		return nil
	default: // an existing non-directory
		if pat.Match == policy.MatchChildren {
			res(Narrowed, "", r, "%s is not a directory, so %s covers nothing", pat.Path, obj)
			return nil
		}
		p.add(pat.Path, r&fileClass, false)
		if self := r & (rMake | rRemoveFile | rRefer); self != 0 {
			return p.parent(obj, pat.Path, self, res)
		}
		return nil
	}
}

// parent grants rights that act on path itself (create, remove, rename)
// on its parent directory, which Landlock applies to every entry there.
func (p *planner) parent(obj, path string, r FSRights, res func(ResidualKind, string, FSRights, string, ...any)) error {
	dir, err := nearestDir(p.fs, filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("landlock: %s: %w", obj, err)
	}
	if err := refuseRoot(obj, dir, r, "creating, removing or renaming an entry of / cannot be walled in; declare paths inside a directory"); err != nil {
		return err
	}
	p.add(dir, r, true)
	res(Widened, dir, r, "creating, removing or renaming %s is a right on its directory: every entry below %s gets it", path, dir)
	return nil
}

func refuseRoot(obj, dir string, r FSRights, fix string) error {
	if dir == "/" && r&writeClass != 0 {
		return fmt.Errorf("%w: %s: the nearest directory Landlock can attach %s to is /, which would open the whole file system; %s", ErrUnexpressible, obj, r&writeClass, fix)
	}
	return nil
}

// nearestDir returns dir or its nearest existing ancestor.
func nearestDir(fsys PlanFS, dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		info, err := fsys.Stat(d)
		if err == nil {
			if !info.IsDir() {
				return "", fmt.Errorf("%s is not a directory", d)
			}
			return d, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if d == "/" {
			return "", err
		}
	}
}

func isProcSelf(p string) bool {
	for _, s := range []string{"/proc/self", "/proc/thread-self"} {
		if p == s || strings.HasPrefix(p, s+"/") {
			return true
		}
	}
	return false
}

func (p *planner) interpreters(paths []string) {
	var granted []string
	for _, ip := range paths {
		info, err := p.fs.Stat(ip)
		if err != nil || info.IsDir() {
			continue // another architecture's or another layout's loader
		}
		// The loaders' paths go through links (/lib64 -> usr/lib64 on a
		// merged /usr): the rule goes on the file they name, as no rule
		// path may hold a link.
		real, err := p.fs.EvalSymlinks(ip)
		if err != nil {
			continue
		}
		p.add(real, execRights, false)
		granted = append(granted, real)
	}
	if len(granted) > 0 {
		p.residual(Residual{Kind: Widened, Wall: strings.Join(granted, " "), Rights: execRights & p.plan.HandledFS,
			Reason: "ELF interpreters need EXECUTE for dynamic binaries to start; a direct exec of one (ld.so /any/readable/file) runs code Landlock never saw as an exec: detection must flag an exec of an interpreter path"})
	}
}

// network builds Landlock TCP port rules (ABI >= 4). Landlock knows ports,
// not addresses: the address part of a NET intent is cgroup-net's wall.
func (p *planner) network(rs *policy.Ruleset) {
	handled := handledNetTCP(p.plan.ABI)
	if handled == 0 {
		p.residual(Residual{Kind: Unmediated, Reason: fmt.Sprintf("Landlock ABI %d has no network rights: TCP connect and bind are walled by cgroup-net only", p.plan.ABI)})
		return
	}
	const bind, connect = NetRights(1), NetRights(2) // LANDLOCK_ACCESS_NET_{BIND,CONNECT}_TCP
	ports := map[uint16]NetRights{}
	for _, r := range rs.Net {
		pat := r.Pattern
		if pat.Raw || pat.Proto == policy.ProtoUDP {
			continue
		}
		var right NetRights
		switch {
		case r.Access.Has(policy.Consumes):
			right = connect
		case r.Access.Has(policy.Provides):
			right = bind
		default:
			continue
		}
		obj := "NET:" + pat.String()
		if int(pat.Ports.Hi)-int(pat.Ports.Lo) >= maxPortRange {
			handled &^= right
			p.residual(Residual{Kind: Unmediated, Object: obj, Intents: []int{r.Intent},
				Reason: fmt.Sprintf("port range %s is too wide for per-port rules: Landlock %s is left unrestricted; cgroup-net walls it", pat.Ports, right)})
			continue
		}
		for port := int(pat.Ports.Lo); port <= int(pat.Ports.Hi); port++ {
			ports[uint16(port)] |= right
		}
		if !(pat.Host == "" && pat.Prefix.Bits() == 0) {
			p.residual(Residual{Kind: Widened, Object: obj, Intents: []int{r.Intent},
				Reason: fmt.Sprintf("Landlock walls TCP ports only: %s is allowed to every address on port %s; cgroup-net walls the address", right, pat.Ports)})
		}
	}
	p.plan.HandledNet = handled
	for port, r := range ports {
		if r &= handled; r != 0 {
			p.plan.Ports = append(p.plan.Ports, PortRule{Port: port, Rights: r})
		}
	}
	sort.Slice(p.plan.Ports, func(i, j int) bool { return p.plan.Ports[i].Port < p.plan.Ports[j].Port })
	p.residual(Residual{Kind: Unmediated, Reason: "UDP, raw sockets and MPTCP are not walled by Landlock at this ABI; cgroup-net walls them"})
}

func (p *planner) globals() {
	abi := p.plan.ABI
	p.residual(Residual{Kind: Unmediated, Reason: "chmod, chown, utimes and xattr changes (MUTATES) are not Landlock rights"})
	p.residual(Residual{Kind: Unmediated, Reason: "stat, access, readlink and getxattr of any path are not mediated (metadata, not content)"})
	p.residual(Residual{Kind: Unmediated, Reason: "file descriptors inherited at launch (stdio, extra files) keep the access they were opened with"})
	p.residual(Residual{Kind: Unmediated, Reason: "ioctls that change a file's metadata (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...; a read-only descriptor is enough for the owner) are not Landlock rights on files: seccomp refuses them when the manifest declares no MUTATES, else the tracepoints detect them as MUTATES of the descriptor's file"})
	p.residual(Residual{Kind: Unmediated, Reason: "executable mappings of files (mmap/mprotect with PROT_EXEC: the dynamic loader run directly, dlopen of an undeclared file) are not Landlock rights: an exec of the loader is detected, a declared program's mapping of other code is not seen (bpf-lsm decides both before the effect)"})
	if abi < 2 {
		p.residual(Residual{Kind: Narrowed, Reason: "Landlock ABI 1 has no REFER right: every link or rename across directories is denied"})
	}
	if abi < 3 {
		p.residual(Residual{Kind: Unmediated, Reason: "truncate is not a Landlock right below ABI 3"})
	}
	if abi < 5 {
		p.residual(Residual{Kind: Unmediated, Reason: "ioctl on devices is not a Landlock right below ABI 5"})
	}
	if abi < 6 {
		p.residual(Residual{Kind: Unmediated, Reason: "signals and abstract unix sockets are not scoped below ABI 6"})
	}
	if abi < 9 {
		p.residual(Residual{Kind: Unmediated, Reason: "connecting to pathname unix sockets is not a Landlock right below ABI 9"})
	}
}

// linkOnPath returns the first component of path (itself included) that
// is a symbolic link, or "" when there is none among the parts that exist.
func (p *planner) linkOnPath(path string) string {
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		prefix := path[:i]
		kind, ok := p.kinds[prefix]
		if !ok {
			kind = ^fs.FileMode(0)
			if info, err := p.fs.Lstat(prefix); err == nil {
				kind = info.Mode().Type()
			}
			p.kinds[prefix] = kind
		}
		switch {
		case kind == ^fs.FileMode(0):
			return ""
		case kind&fs.ModeSymlink != 0:
			return prefix
		}
	}
	return ""
}

// MemfdNoexecSupported reports whether the kernel has vm.memfd_noexec
// (Linux 6.3): a Landlock plan then asks for it (LandlockPlan.MemfdNoexec).
func MemfdNoexecSupported() bool {
	_, err := os.Stat(stage2.MemfdNoexecSysctl)
	return err == nil
}
