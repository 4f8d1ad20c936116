//go:build linux

package session

import (
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy"
)

// TestPrivateTmpAgentView: an object a backend named at the private
// /tmp's host path is named as the agent sees it; other paths, and a
// sibling whose name only starts alike, are left as they are.
func TestPrivateTmpAgentView(t *testing.T) {
	p := &privateTmp{binds: []launch.Bind{{Src: "/var/lib/klock/tmp/s1/tmp", Dst: "/tmp"}, {Src: "/var/lib/klock/tmp/s1/vartmp", Dst: "/var/tmp"}}}
	for in, want := range map[string]string{
		"/var/lib/klock/tmp/s1/tmp/build/a.out": "/tmp/build/a.out",
		"/var/lib/klock/tmp/s1/tmp":             "/tmp",
		"/var/lib/klock/tmp/s1/vartmp/x":        "/var/tmp/x",
		"/var/lib/klock/tmp/s1/tmpx/y":          "/var/lib/klock/tmp/s1/tmpx/y",
		"/srv/repo/a":                           "/srv/repo/a",
	} {
		ev := event.Event{Triple: policy.FileTriple(policy.Mutates, in), Extra: policy.FileTriple(policy.Consumes, in)}
		p.agentView(&ev)
		if ev.Triple.Path != want || ev.Extra.Path != want {
			t.Errorf("%s named %s / %s, want %s", in, ev.Triple.Path, ev.Extra.Path, want)
		}
	}
	var none *privateTmp
	ev := event.Event{Triple: policy.FileTriple(policy.Mutates, "/var/lib/klock/tmp/s1/tmp/a")}
	none.agentView(&ev)
	if ev.Triple.Path != "/var/lib/klock/tmp/s1/tmp/a" {
		t.Errorf("without a private /tmp the name changed: %s", ev.Triple.Path)
	}
}
