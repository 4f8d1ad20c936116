//go:build linux

package launch

import "testing"

func TestSmoke(t *testing.T) {
	wd := agentDir(t)
	rs := compile(t, wd, "PROVIDES PROC:/usr/bin/dash", "PROVIDES PROC:/usr/bin/id")
	r := sh(t, rs, "id; exit 7")
	t.Logf("%+v", r)
}
