package decide

import (
	"strings"
	"syscall"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// A shell searching PATH execs /usr/local/bin/x and gets ENOENT: nothing was
// touched, so strict mode must not kill; an undeclared path that exists and
// was refused still kills, and an unresolved relative path fails closed.
func TestAbsentObjectsAreNotViolations(t *testing.T) {
	src := `apiVersion: klock/v1
agent: {id: a}
baseline: none
intents: [PROVIDES PROC:/usr/bin/true]
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`
	m, err := policy.Parse("a.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := policy.Compile(m)
	e := New(rs, policy.ModeStrict)
	ev := func(tr policy.Triple, errno syscall.Errno) event.Event {
		return event.Event{Triple: tr, Errno: int32(errno), Syscall: "execve", Blocked: errno == syscall.EACCES}
	}
	if v := e.Observe(ev(policy.ExecTriple("/usr/local/bin/true"), syscall.ENOENT)); v.Action != ActionAllow {
		t.Fatalf("exec of a missing path: %v", v.Action)
	}
	if v := e.Observe(ev(policy.FileTriple(policy.Consumes, "/etc/missing.conf"), syscall.ENOTDIR)); v.Action != ActionAllow {
		t.Fatalf("open of a missing path: %v", v.Action)
	}
	if v := e.Observe(ev(policy.FileTriple(policy.Consumes, "relative.conf"), syscall.ENOENT)); v.Action != ActionKill {
		t.Fatalf("an unresolved relative path must fail closed: %v", v.Action)
	}
	if v := e.Observe(ev(policy.FileTriple(policy.Consumes, ""), syscall.ENOENT)); v.Action != ActionAllow {
		t.Fatalf(`open(""), refused with ENOENT before any lookup: %v`, v.Action)
	}
	if v := e.Observe(ev(policy.ExecTriple("/usr/bin/false"), syscall.EACCES)); v.Action != ActionKill {
		t.Fatalf("a refused exec of an existing undeclared binary must kill: %v", v.Action)
	}
	var failed uint64
	for _, o := range e.Records().Observed {
		if o.Triple.Path == "/usr/local/bin/true" {
			failed = o.Failed
		}
	}
	if failed != 1 {
		t.Fatalf("the absent exec must stay in the log as a failed attempt (failed=%d)", failed)
	}
}

// mkdir -p and install -d make every directory of a path in turn and get
// EEXIST for those that are there (/srv, /srv/kt): no effect, and no wall
// could have refused it (the kernel's lookup answers before the LSM hooks).
// Strict mode must not kill for it, and --learn must not declare
// PROVIDES FILE:/srv (a Landlock rule that would have to go on /, which
// klock run then refuses to start with).
func TestExistingNamesAreNotViolations(t *testing.T) {
	m := manifest(t, "strict", "none", "PROVIDES FILE:/srv/prefix/**")
	e := New(compile(t, m), policy.ModeStrict)
	eexist := func(ev event.Event) event.Event { ev.Errno = int32(syscall.EEXIST); return ev }
	for _, ev := range []event.Event{
		eexist(fileEv(policy.Provides, "/srv", "mkdir")),
		eexist(fileEv(policy.Mutates, "/etc/passwd", "openat")), // O_CREAT|O_EXCL of an existing file
		eexist(renameEv("/srv/prefix/a", "/etc/hosts", false)),
	} {
		if v := e.Observe(ev); v.Action != ActionAllow {
			t.Fatalf("%s %s failed with EEXIST: %v, want allow (no effect)", ev.Syscall, ev.Triple, v.Action)
		}
	}
	if v := e.Observe(fileEv(policy.Provides, "/srv/other", "mkdir")); v.Action != ActionKill {
		t.Fatalf("a mkdir that made an undeclared directory must kill: %v", v.Action)
	}
	if v := e.Observe(blocked(fileEv(policy.Provides, "/etc/x", "mkdir"))); v.Action != ActionKill {
		t.Fatalf("a refused mkdir must kill: %v", v.Action)
	}

	// Permissive learning: the EEXIST mkdirs of install -d are not learned.
	lm := manifest(t, "permissive", "none")
	le := New(compile(t, lm), policy.ModePermissive)
	le.Observe(eexist(fileEv(policy.Provides, "/srv", "mkdir")))
	le.Observe(eexist(fileEv(policy.Provides, "/srv/prefix", "mkdir")))
	le.Observe(fileEv(policy.Provides, "/srv/prefix/bin", "mkdir"))
	out, err := le.Learned(lm, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); strings.Contains(s, "PROVIDES FILE:/srv #") || strings.Contains(s, "PROVIDES FILE:/srv/prefix #") || !strings.Contains(s, "PROVIDES FILE:/srv/prefix/bin") {
		t.Fatalf("learned:\n%s", s)
	}
}
