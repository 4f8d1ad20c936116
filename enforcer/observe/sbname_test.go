package observe

import "testing"

// TestPickSbName: the kernel's path of a changed inode, placed on the
// agent's mounts, is the name when one mount holds it, or, among several
// (a bind of a subtree: a private /tmp), the one the call's own clean
// absolute name gives; never a guess.
func TestPickSbName(t *testing.T) {
	both := []string{"/run/klock/tmp/s1/tmp/pip-x/f.pth", "/tmp/pip-x/f.pth"}
	for _, c := range []struct {
		cands []string
		arg   string
		want  string
		ok    bool
	}{
		{[]string{"/work/a"}, "", "/work/a", true},
		{[]string{"/work/a"}, "/work/link/a", "/work/a", true},
		{both, cleanAbsName("/tmp/pip-x/f.pth"), "/tmp/pip-x/f.pth", true},
		{both, cleanAbsName("/run/klock/tmp/s1/tmp/pip-x/f.pth"), "/run/klock/tmp/s1/tmp/pip-x/f.pth", true},
		{both, cleanAbsName("pip-x/f.pth"), "", false},
		{both, cleanAbsName("/tmp/x/../pip-x/f.pth"), "", false},
		{both, cleanAbsName("/tmp//pip-x/f.pth"), "", false},
		{both, cleanAbsName("/tmp/other/f.pth"), "", false},
		{nil, "/tmp/pip-x/f.pth", "", false},
	} {
		got, ok := pickSbName(c.cands, c.arg)
		if got != c.want || ok != c.ok {
			t.Errorf("pickSbName(%q, %q) = %q, %v; want %q, %v", c.cands, c.arg, got, ok, c.want, c.ok)
		}
	}
}
