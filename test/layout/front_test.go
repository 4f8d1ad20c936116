package layout

import (
	"os/exec"
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
