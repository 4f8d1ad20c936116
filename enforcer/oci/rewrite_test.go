package oci

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
)

func basePlan() Plan {
	return Plan{KlockPath: "/usr/local/bin/klock", StateDir: "/run/klock/containers/c1", Workdir: "/workspace", ManifestAnnotation: "/etc/klock/a.yaml"}
}

func TestRewrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  func() *specs.Spec
		plan  func(p *Plan)
		check func(t *testing.T, s *specs.Spec)
	}{
		{name: "runc spec, full", spec: func() *specs.Spec { return runcSpec(t) }, plan: func(p *Plan) { p.Landlock = true },
			check: func(t *testing.T, s *specs.Spec) {
				if got := s.Process.Args; !reflect.DeepEqual(got, []string{Stage2Path, "--klock-wall=" + WallPath, "--klock-canary=" + CanaryReportPath, "--", "sh"}) {
					t.Errorf("args = %q", got)
				}
				// The canaries' tmpfs: last (over anything at /run), of the
				// process's user, neither noexec nor read-only.
				c := s.Mounts[len(s.Mounts)-1]
				if c.Destination != "/run/klock-canary" || c.Type != "tmpfs" || !slices.Contains(c.Options, "uid=65534") ||
					slices.Contains(c.Options, "noexec") || slices.Contains(c.Options, "ro") {
					t.Errorf("canary mount %+v", c)
				}
				devAt, stageAt := -1, -1
				for i, m := range s.Mounts {
					switch m.Destination {
					case "/dev":
						devAt = i
					case StageDir:
						stageAt = i
						if m.Source != "/run/klock/containers/c1" || !slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "noexec") {
							t.Errorf("stage mount %+v", m)
						}
					}
				}
				if devAt < 0 || stageAt != devAt+1 {
					t.Errorf("/dev at %d, %s at %d: want it right after /dev", devAt, StageDir, stageAt)
				}
			}},
		{name: "hooks appended", spec: func() *specs.Spec {
			s := runcSpec(t)
			s.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/bin/theirs"}}, Poststop: []specs.Hook{{Path: "/bin/theirs2"}}}
			return s
		}, check: func(t *testing.T, s *specs.Spec) {
			if len(s.Hooks.CreateRuntime) != 2 || s.Hooks.CreateRuntime[0].Path != "/bin/theirs" ||
				!reflect.DeepEqual(s.Hooks.CreateRuntime[1], specs.Hook{Path: "/usr/local/bin/klock", Args: []string{"klock", "oci-hook", "createRuntime"}}) {
				t.Errorf("createRuntime hooks %+v", s.Hooks.CreateRuntime)
			}
			if len(s.Hooks.Poststop) != 2 || !reflect.DeepEqual(s.Hooks.Poststop[1].Args, []string{"klock", "oci-hook", "poststop"}) {
				t.Errorf("poststop hooks %+v", s.Hooks.Poststop)
			}
			if s.Process.Args[0] != "sh" {
				t.Errorf("args changed without Landlock: %q", s.Process.Args)
			}
			for _, m := range s.Mounts {
				if m.Destination == StageDir {
					t.Error("stage dir mounted without Landlock")
				}
			}
		}},
		{name: "identity, caps, annotations, tmpfs", spec: func() *specs.Spec {
			s := runcSpec(t)
			s.Process.User.AdditionalGids = []uint32{0, 10}
			s.Process.NoNewPrivileges = false
			return s
		}, check: func(t *testing.T, s *specs.Spec) {
			u := s.Process.User
			if u.UID != NobodyID || u.GID != NobodyID || !reflect.DeepEqual(u.AdditionalGids, []uint32{10}) {
				t.Errorf("user %+v", u)
			}
			c := s.Process.Capabilities
			if c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
				t.Errorf("capabilities %+v", c)
			}
			if !s.Process.NoNewPrivileges {
				t.Error("noNewPrivileges not set")
			}
			if s.Annotations[AnnotationManifest] != "/etc/klock/a.yaml" || s.Annotations[AnnotationRuntime] != RuntimeFull {
				t.Errorf("annotations %v", s.Annotations)
			}
			last := s.Mounts[len(s.Mounts)-1]
			if last.Destination != "/workspace/.klock" || last.Type != "tmpfs" || !slices.Contains(last.Options, "ro") {
				t.Errorf("last mount %+v", last)
			}
			// An empty capabilities object must survive JSON: nil would
			// leave the runtime's defaults.
			data, _ := json.Marshal(s)
			var back specs.Spec
			_ = json.Unmarshal(data, &back)
			if back.Process.Capabilities == nil {
				t.Error("capabilities vanish in JSON")
			}
		}},
		{name: "allow root, no workdir", spec: func() *specs.Spec { return runcSpec(t) }, plan: func(p *Plan) { p.AllowRoot, p.Workdir = true, "" },
			check: func(t *testing.T, s *specs.Spec) {
				if s.Process.User.UID != 0 || s.Process.User.GID != 0 {
					t.Errorf("user %+v", s.Process.User)
				}
				for _, m := range s.Mounts {
					if m.Type == "tmpfs" && m.Destination != "/dev" && m.Destination != "/sys/fs/cgroup" && len(m.Destination) > 6 && m.Destination[len(m.Destination)-6:] == ".klock" {
						t.Errorf("tmpfs over .klock without a workdir: %+v", m)
					}
				}
			}},
		{name: "non-root kept", spec: func() *specs.Spec {
			s := runcSpec(t)
			s.Process.User = specs.User{UID: 1000, GID: 1000}
			return s
		}, check: func(t *testing.T, s *specs.Spec) {
			if s.Process.User.UID != 1000 || s.Process.User.GID != 1000 {
				t.Errorf("user %+v", s.Process.User)
			}
		}},
		{name: "no linux, no /dev mount", spec: func() *specs.Spec {
			return &specs.Spec{Process: &specs.Process{Args: []string{"/bin/agent", "-x"}}, Root: &specs.Root{Path: "r"}}
		}, plan: func(p *Plan) { p.Landlock = true }, check: func(t *testing.T, s *specs.Spec) {
			if s.Linux == nil || s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActAllow {
				t.Fatalf("seccomp %+v", s.Linux)
			}
			if s.Mounts[len(s.Mounts)-2].Destination != StageDir {
				t.Errorf("mounts %+v", s.Mounts)
			}
			if !reflect.DeepEqual(s.Process.Args[4:], []string{"/bin/agent", "-x"}) {
				t.Errorf("args %q", s.Process.Args)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec()
			p := basePlan()
			if tc.plan != nil {
				tc.plan(&p)
			}
			if err := Rewrite(s, p); err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
			denied := deniedNames(s.Linux.Seccomp)
			for _, n := range stage2.DeniedSyscalls() {
				if !denied[n] {
					t.Errorf("seccomp does not deny %s", n)
				}
			}
		})
	}
}

// deniedNames: the names an unconditional rule denies, or every name no
// rule allows when the default denies (enough for the cases above; the
// property test models arguments).
func deniedNames(p *specs.LinuxSeccomp) map[string]bool {
	out := map[string]bool{}
	for _, r := range p.Syscalls {
		if denies(r.Action) && len(r.Args) == 0 {
			for _, n := range r.Names {
				out[n] = true
			}
		}
	}
	if denies(p.DefaultAction) {
		for _, n := range stage2.DeniedSyscalls() {
			allowed := false
			for _, r := range p.Syscalls {
				if !denies(r.Action) && slices.Contains(r.Names, n) {
					allowed = true
				}
			}
			if !allowed {
				out[n] = true
			}
		}
	}
	return out
}

func TestRewriteRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *specs.Spec
		plan func(p *Plan)
	}{
		{name: "nil spec"},
		{name: "no process", spec: &specs.Spec{}},
		{name: "no args with landlock", spec: &specs.Spec{Process: &specs.Process{}}, plan: func(p *Plan) { p.Landlock = true }},
		{name: "relative klock", spec: &specs.Spec{Process: &specs.Process{Args: []string{"x"}}}, plan: func(p *Plan) { p.KlockPath = "klock" }},
		{name: "relative state", spec: &specs.Spec{Process: &specs.Process{Args: []string{"x"}}}, plan: func(p *Plan) { p.Landlock, p.StateDir = true, "run/x" }},
		{name: "relative workdir", spec: &specs.Spec{Process: &specs.Process{Args: []string{"x"}}}, plan: func(p *Plan) { p.Workdir = "w" }},
		{name: "no annotation", spec: &specs.Spec{Process: &specs.Process{Args: []string{"x"}}}, plan: func(p *Plan) { p.ManifestAnnotation = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePlan()
			if tc.plan != nil {
				tc.plan(&p)
			}
			var before []byte
			if tc.spec != nil {
				before, _ = json.Marshal(tc.spec)
			}
			if err := Rewrite(tc.spec, p); !errors.Is(err, ErrBadSpec) {
				t.Fatalf("err = %v; want ErrBadSpec", err)
			}
			if tc.spec != nil {
				after, _ := json.Marshal(tc.spec)
				if string(after) != string(before) {
					t.Fatalf("a refused rewrite changed the spec:\n%s\n%s", before, after)
				}
			}
		})
	}
}

// TestRewriteIdempotent: a bundle created twice (a retry, a test harness)
// gets the same spec as once: one prefix, one pair of hooks, one of each
// klock mount; and an annotation claiming a rewrite skips nothing.
func TestRewriteIdempotent(t *testing.T) {
	p := basePlan()
	p.Landlock = true
	once := runcSpec(t)
	if err := Rewrite(once, p); err != nil {
		t.Fatal(err)
	}
	twice := runcSpec(t)
	_ = Rewrite(twice, p)
	if err := Rewrite(twice, p); err != nil {
		t.Fatal(err)
	}
	if a, b := js(once), js(twice); a != b {
		t.Fatalf("rewriting twice differs:\n%s\n%s", a, b)
	}
	claimed := runcSpec(t)
	claimed.Annotations = map[string]string{AnnotationRuntime: RuntimeFull}
	if err := Rewrite(claimed, p); err != nil {
		t.Fatal(err)
	}
	if claimed.Process.Args[0] != Stage2Path || len(claimed.Hooks.CreateRuntime) != 1 {
		t.Fatal("the io.klock.runtime annotation skipped the rewrite")
	}
}

// TestRewriteOwnsItsMountPoints: a spec's own mounts at /dev/.klock (a
// stand-in klock-stage2) or at <workdir>/.klock, or below them, are
// removed, wherever they were in the list.
func TestRewriteOwnsItsMountPoints(t *testing.T) {
	s := runcSpec(t)
	s.Mounts = append(s.Mounts,
		specs.Mount{Destination: "/dev/.klock", Type: "bind", Source: "/home/eve/fake", Options: []string{"bind"}},
		specs.Mount{Destination: "/dev/.klock/klock-stage2", Type: "bind", Source: "/home/eve/fake/stage2", Options: []string{"bind"}},
		specs.Mount{Destination: "/workspace/.klock/backup", Type: "bind", Source: "/home/eve/b", Options: []string{"bind"}},
		specs.Mount{Destination: "/workspace/.klockx", Type: "tmpfs", Source: "tmpfs"},
	)
	p := basePlan()
	p.Landlock = true
	if err := Rewrite(s, p); err != nil {
		t.Fatal(err)
	}
	var at []string
	for _, m := range s.Mounts {
		if m.Source == "/home/eve/fake" || m.Source == "/home/eve/fake/stage2" || m.Source == "/home/eve/b" {
			t.Errorf("mount %+v kept", m)
		}
		at = append(at, m.Destination)
	}
	if !slices.Contains(at, "/workspace/.klockx") || !slices.Contains(at, StageDir) || !slices.Contains(at, "/workspace/.klock") {
		t.Errorf("mounts %v", at)
	}
}
