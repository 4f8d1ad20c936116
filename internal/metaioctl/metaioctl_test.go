package metaioctl

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestListMatchesTheBPFHeader: the BPF programs (bpf/include/metaioctl.h)
// decide exactly the ioctls the seccomp filter refuses.
func TestListMatchesTheBPFHeader(t *testing.T) {
	b, err := os.ReadFile("../../bpf/include/metaioctl.h")
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]uint32{}
	for _, m := range regexp.MustCompile(`#define KM_(\w+) (0x[0-9a-f]+)`).FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseUint(m[2], 0, 32)
		if err != nil {
			t.Fatal(err)
		}
		defs[m[1]] = uint32(v)
	}
	cases := map[string]bool{}
	for _, m := range regexp.MustCompile(`case KM_(\w+):`).FindAllStringSubmatch(string(b), -1) {
		cases[m[1]] = true
	}
	if len(defs) != len(List) || len(cases) != len(List) {
		t.Errorf("header: %d defines, %d cases; List: %d", len(defs), len(cases), len(List))
	}
	for _, m := range List {
		if defs[m.Name] != m.Cmd || !cases[m.Name] {
			t.Errorf("%s %#x: header has %#x (case %v)", m.Name, m.Cmd, defs[m.Name], cases[m.Name])
		}
	}
}
