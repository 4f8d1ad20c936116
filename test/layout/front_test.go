package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// light are the binaries that must start in the time of a small program:
// the klock front (every klock run klockd serves) and the session
// launcher. heavy are the packages whose initialisation costs
// milliseconds (cel-go's and protobuf's registries, SQLite, the etcd
// client, the BPF loader): a new import that drags one in is caught
// here, not in a benchmark weeks later.
var (
	light = []string{"cmd/klock", "cmd/klock-stage2"}
	heavy = []string{
		"cel.dev/cel-go", "google.golang.org/protobuf", "google.golang.org/grpc",
		"modernc.org/sqlite", "go.etcd.io/etcd", "github.com/cilium/ebpf",
		"github.com/spf13/cobra", module + "policy", module + "enforcer/session",
	}
)

func TestLightBinariesLinkNothingHeavy(t *testing.T) {
	for _, bin := range light {
		out, err := exec.Command("go", "list", "-deps", module+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, h := range heavy {
				if dep == h || strings.HasPrefix(dep, h+"/") {
					t.Errorf("%s links %s (go list -deps %s): it must stay small; move what needs it to the full CLI or klockd", bin, dep, module+bin)
				}
			}
		}
	}
}

// TestRuntimeLinksNoCEL: klock-runtime, which engines run several times
// per container (create, start, state, kill, delete), parses manifests
// but never runs an autonomy condition: cel-go and protobuf stay out of
// it (policy/celexpr), as they stay out of package policy. klockd and
// klock-cli, which admit manifests, link the compiler and check
// conditions.
func TestRuntimeLinksNoCEL(t *testing.T) {
	deps := func(bin string) []string {
		out, err := exec.Command("go", "list", "-deps", module+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		return strings.Fields(string(out))
	}
	for _, dep := range deps("cmd/klock-runtime") {
		for _, h := range []string{"cel.dev/cel-go", "google.golang.org/protobuf"} {
			if dep == h || strings.HasPrefix(dep, h+"/") {
				t.Errorf("klock-runtime links %s: keep what needs it in klockd (go list -deps %scmd/klock-runtime)", dep, module)
			}
		}
	}
	for _, bin := range []string{"cmd/klockd", "cmd/klock-cli"} {
		if !slices.Contains(deps(bin), module+"policy/celexpr") {
			t.Errorf("%s does not link policy/celexpr: it would admit a manifest whose autonomy condition does not compile", bin)
		}
	}
}
