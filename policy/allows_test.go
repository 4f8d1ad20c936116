package policy

import (
	"errors"
	"net/netip"
	"testing"
)

func TestAllowsFiles(t *testing.T) {
	rs := mustCompile(t,
		"CONSUMES FILE:/srv/repo/**",
		"MUTATES FILE:/srv/repo/src/**",
		"PROVIDES FILE:/srv/repo/build/*",
		"DELETES FILE:/srv/repo/build/*",
		"DEPENDS_ON FILE:/srv/repo/go.mod",
		"MUTATES FILE:/srv/repo/README.md",
	)
	for _, tc := range []struct {
		p     Predicate
		path  string
		allow bool
		by    string // the intent that allows, when allowed
	}{
		{Consumes, "/srv/repo", true, "CONSUMES FILE:/srv/repo/**"},
		{Consumes, "/srv/repo/a/b/c", true, "CONSUMES FILE:/srv/repo/**"},
		{Consumes, "/srv/repository", false, ""},
		{Mutates, "/srv/repo/src/x.go", true, "MUTATES FILE:/srv/repo/src/**"},
		{Consumes, "/srv/repo/src/x.go", true, "CONSUMES FILE:/srv/repo/**"}, // direct beats implied
		{Mutates, "/srv/repo/other.go", false, ""},
		{Mutates, "/srv/repo/README.md", true, "MUTATES FILE:/srv/repo/README.md"},
		{Provides, "/srv/repo/build/out.o", true, "PROVIDES FILE:/srv/repo/build/*"},
		{Provides, "/srv/repo/build/sub/out.o", false, ""}, // /* is one level
		{Provides, "/srv/repo/build", false, ""},
		{Deletes, "/srv/repo/build/out.o", true, "DELETES FILE:/srv/repo/build/*"},
		{Deletes, "/srv/repo/src/x.go", false, ""},
		{Mutates, "/srv/repo/build/out.o", false, ""}, // PROVIDES does not grant MUTATES
		{Consumes, "/srv/repo/go.mod", true, "CONSUMES FILE:/srv/repo/**"},
		{Mutates, "/srv/repo/go.mod", false, ""},
		{Mutates, "/etc/hosts", false, ""},
		{Consumes, "/etc/hosts", true, "CONSUMES FILE:/etc/hosts"}, // baseline
		{Consumes, "/etc/shadow", false, ""},
		{Mutates, "/dev/null", true, "MUTATES FILE:/dev/null"},
		{Renames, "/srv/repo/src/x.go", false, ""},
		{Consumes, "relative/path", false, ""},
	} {
		d := rs.Allows(FileTriple(tc.p, tc.path))
		if d.Allowed != tc.allow {
			t.Errorf("%s %s: allowed=%v, want %v", tc.p, tc.path, d.Allowed, tc.allow)
			continue
		}
		if tc.allow && d.Intent.String() != tc.by {
			t.Errorf("%s %s: allowed by %q, want %q", tc.p, tc.path, d.Intent, tc.by)
		}
	}
}

func TestBaselineOrigin(t *testing.T) {
	rs := mustCompile(t, "CONSUMES FILE:/w/**")
	d := rs.Allows(FileTriple(Consumes, "/usr/lib/x86_64-linux-gnu/libc.so.6"))
	if !d.Allowed || d.Intent.Origin != "baseline:system-ro" {
		t.Fatalf("libc read: %+v", d)
	}
	if rs.Allows(FileTriple(Mutates, "/usr/bin/ls")).Allowed {
		t.Fatal("baseline must be read-only")
	}
	if rs.Allows(ExecTriple("/usr/bin/ls")).Allowed {
		t.Fatal("baseline must not grant exec")
	}
	if len(rs.Interpreters) == 0 {
		t.Fatal("system-ro must list the ELF interpreters")
	}
	none := mustParse(t, "baseline: none\n"+manifest([]string{"CONSUMES FILE:/w/**"}, ""))
	rs2, _ := Compile(none)
	if rs2.Allows(FileTriple(Consumes, "/usr/lib/x")).Allowed || len(rs2.Interpreters) != 0 {
		t.Fatal("baseline none must add nothing")
	}
}

func TestScopeViolationMessage(t *testing.T) {
	rs := mustCompile(t, "CONSUMES FILE:/srv/**")
	tr := FileTriple(Mutates, "/etc/hosts")
	v := rs.Allows(tr).Violation(tr)
	if got, want := v.Error(), "ScopeViolationError: Agent attempted MUTATES on /etc/hosts but only declared CONSUMES"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	tr = FileTriple(Mutates, "/root/.ssh/id_rsa")
	if got := rs.Allows(tr).Violation(tr).Error(); got != "ScopeViolationError: Agent attempted MUTATES on /root/.ssh/id_rsa but declared nothing there" {
		t.Fatalf("got %q", got)
	}
	if v.Needed() != "MUTATES FILE:/etc/hosts" {
		t.Fatalf("Needed = %q", v.Needed())
	}
	ok := FileTriple(Consumes, "/srv/x")
	if rs.Allows(ok).Violation(ok) != nil {
		t.Fatal("allowed decision has a violation")
	}
}

func TestAllowsExec(t *testing.T) {
	rs := mustCompile(t, "PROVIDES PROC:/usr/bin/git", "PROVIDES PROC:/usr/local/go/bin/**")
	if d := rs.Allows(FileTriple(Consumes, "/usr/local/go/bin/go")); !d.Allowed || d.Intent.String() != "PROVIDES PROC:/usr/local/go/bin/**" {
		t.Errorf("an executable may be read (interpreters read scripts): %+v", d)
	}
	if rs.Allows(FileTriple(Mutates, "/usr/bin/git")).Allowed {
		t.Error("an executable must not become writable")
	}
	for path, want := range map[string]bool{
		"/usr/bin/git": true, "/usr/bin/gitk": false, "/usr/local/go/bin/go": true,
		"/usr/local/go/bin/sub/x": true, "/lib64/ld-linux-x86-64.so.2": false,
	} {
		if got := rs.Allows(ExecTriple(path)).Allowed; got != want {
			t.Errorf("exec %s = %v, want %v", path, got, want)
		}
	}
}

func TestAllowsNet(t *testing.T) {
	rs := mustCompile(t,
		"CONSUMES NET:127.0.0.1:8080/tcp",
		"CONSUMES NET:10.0.0.0/8:1000-2000",
		"CONSUMES NET:[::1]:53/udp",
		"PROVIDES NET:127.0.0.1:9000",
		"CONSUMES NET:api.example.com:443",
	)
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		p     Predicate
		addr  string
		proto Proto
		want  bool
	}{
		{Consumes, "127.0.0.1:8080", ProtoTCP, true},
		{Consumes, "127.0.0.1:8080", ProtoUDP, false},
		{Consumes, "127.0.0.1:8081", ProtoTCP, false},
		{Consumes, "[::ffff:127.0.0.1]:8080", ProtoTCP, true}, // v4-mapped is the v4 address
		{Consumes, "[::ffff:127.0.0.1]:8081", ProtoTCP, false},
		{Consumes, "10.1.2.3:1500", ProtoUDP, true},
		{Consumes, "11.1.2.3:1500", ProtoUDP, false},
		{Consumes, "[::1]:53", ProtoUDP, true},
		{Consumes, "[::1]:53", ProtoTCP, false},
		{Provides, "127.0.0.1:9000", ProtoTCP, true},
		{Consumes, "127.0.0.1:9000", ProtoTCP, false}, // bind is not connect
		{Provides, "127.0.0.1:8080", ProtoTCP, false},
	} {
		if got := rs.Allows(NetTriple(tc.p, ap(tc.addr), tc.proto)).Allowed; got != tc.want {
			t.Errorf("%s %s/%s = %v, want %v", tc.p, tc.addr, tc.proto, got, tc.want)
		}
	}
	if rs.Allows(RawSocketTriple()).Allowed {
		t.Error("raw sockets must need NET:raw")
	}
	if !mustCompile(t, "CONSUMES NET:raw").Allows(RawSocketTriple()).Allowed {
		t.Error("NET:raw declared but raw socket denied")
	}
	// Host names are resolved by the enforcer through an injected lookup.
	res, err := rs.Resolve(func(h string) ([]netip.Addr, error) {
		if h != "api.example.com" {
			t.Fatalf("unexpected lookup %s", h)
		}
		return []netip.Addr{netip.MustParseAddr("192.0.2.7")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d := res.Allows(NetTriple(Consumes, ap("192.0.2.7:443"), ProtoTCP))
	if !d.Allowed || d.Intent.String() != "CONSUMES NET:api.example.com:443" {
		t.Fatalf("resolved host: %+v", d)
	}
	if rs.Allows(NetTriple(Consumes, ap("192.0.2.7:443"), ProtoTCP)).Allowed {
		t.Fatal("unresolved ruleset must not allow the address")
	}
	fail := errors.New("nxdomain")
	if _, err := rs.Resolve(func(string) ([]netip.Addr, error) { return nil, fail }); !errors.Is(err, fail) {
		t.Fatalf("a name that does not resolve must fail, got %v", err)
	}
}

func TestWithAmends(t *testing.T) {
	rs := mustCompile(t, "CONSUMES FILE:/w/**")
	tr := FileTriple(Mutates, "/w/x")
	if rs.Allows(tr).Allowed {
		t.Fatal("precondition")
	}
	in, _ := ParseIntent("MUTATES FILE:/w/x")
	in.Origin = ""
	rs2, err := rs.With(in)
	if err != nil {
		t.Fatal(err)
	}
	d := rs2.Allows(tr)
	if !d.Allowed || d.Intent.Origin != "lease" {
		t.Fatalf("amended: %+v", d)
	}
	if rs.Allows(tr).Allowed {
		t.Fatal("With must not change the original")
	}
}

func TestConflictMatrix(t *testing.T) {
	// KLIS-2, rows held, columns incoming: P C M D DEP R.
	rows := map[Predicate]string{
		Provides:  "X.XX.X",
		Consumes:  "..XX.X",
		Mutates:   "XXXXXX",
		Deletes:   "XXXXXX",
		DependsOn: "..XX.X",
		Renames:   "XXXXXX",
	}
	for held, row := range rows {
		for j, in := range Predicates() {
			if got := Conflicts(held, in); got != (row[j] == 'X') {
				t.Errorf("held %s incoming %s: conflict=%v", held, in, got)
			}
		}
	}
	a := Holder{"agent", "s1"}
	if LeaseConflicts(a, Mutates, a, Mutates) {
		t.Error("same agent and session must be re-entrant")
	}
	if !LeaseConflicts(a, Mutates, Holder{"agent", "s2"}, Consumes) {
		t.Error("another session must conflict")
	}
}

// A permissive amendment rebuilds the ruleset: resolved host addresses
// must survive it, or the declared host stops matching its IPs.
func TestWithKeepsResolvedHosts(t *testing.T) {
	rs := mustCompile(t, "CONSUMES NET:api.example.com:443/tcp", "CONSUMES FILE:/w/**")
	res, err := rs.Resolve(func(string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("192.0.2.7")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := ParseIntent("MUTATES FILE:/w/x")
	amended, err := res.With(in)
	if err != nil {
		t.Fatal(err)
	}
	d := amended.Allows(NetTriple(Consumes, netip.MustParseAddrPort("192.0.2.7:443"), ProtoTCP))
	if !d.Allowed || d.Intent.String() != "CONSUMES NET:api.example.com:443/tcp" {
		t.Fatalf("the amendment dropped the resolved address: %+v", d)
	}
}

// TestWithResolvers: a NET intent naming a host lets the agent ask the
// system's resolvers (UDP and TCP port 53), under OriginDNS; a manifest
// that names only addresses gets nothing more.
func TestWithResolvers(t *testing.T) {
	lookup := func(string) ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil }
	servers := []netip.Addr{netip.MustParseAddr("10.255.255.53"), netip.MustParseAddr("::1")}
	dns := func(a string, p Proto) Triple { return NetTriple(Consumes, netip.MustParseAddrPort(a), p) }
	for _, tc := range []struct {
		intent string
		want   bool
	}{
		{"CONSUMES NET:registry.example.org:443/tcp", true},
		{"CONSUMES NET:203.0.113.7:443/tcp", false},
	} {
		rs, err := mustCompile(t, tc.intent).Resolve(lookup)
		if err != nil {
			t.Fatal(err)
		}
		if rs, err = rs.WithResolvers(servers); err != nil {
			t.Fatal(err)
		}
		for _, tr := range []Triple{dns("10.255.255.53:53", ProtoUDP), dns("10.255.255.53:53", ProtoTCP), dns("[::1]:53", ProtoUDP)} {
			d := rs.Allows(tr)
			if d.Allowed != tc.want {
				t.Errorf("%s: %s allowed %v, want %v", tc.intent, tr, d.Allowed, tc.want)
			}
			if d.Allowed && d.Intent.Origin != OriginDNS {
				t.Errorf("%s: %s allowed by %s (origin %q), want origin %q", tc.intent, tr, d.Intent, d.Intent.Origin, OriginDNS)
			}
		}
		if rs.Allows(dns("10.0.0.9:53", ProtoUDP)).Allowed {
			t.Errorf("%s: a server that is not the system's is allowed", tc.intent)
		}
	}
}

// TestAllowsBelow: where it answers for every path below a directory,
// the answer is Allows' for each path there, at any depth, intent
// included; where a rule names a path below the directory (or its
// children alone), it does not answer.
func TestAllowsBelow(t *testing.T) {
	rs := mustCompile(t,
		"CONSUMES FILE:/srv/repo/**",
		"MUTATES FILE:/srv/repo/src/**",
		"PROVIDES FILE:/srv/repo/build/*",
		"CONSUMES FILE:/srv/repo/docs/*",
		"MUTATES FILE:/srv/repo/README.md",
	)
	below := []string{"a", "README.md", "src", "build", "x.go", "*", "a/b", "src/x/y.go", "build/out.o/z"}
	for _, tc := range []struct {
		dir  string
		same bool
	}{
		{"/srv/repo", false}, // src, build, docs, README.md below
		{"/srv/repo/src", true},
		{"/srv/repo/src/pkg/deep", true},
		{"/srv/repo/build", false}, // build/* is not build/x/y's
		{"/srv/repo/docs", false},
		{"/srv/repo/lib", true},
		{"/srv", false},
		{"/", false},
		{"/nowhere/at/all", true},
	} {
		for _, p := range []Predicate{Consumes, Mutates, Provides, Deletes} {
			d, same := rs.AllowsBelow(p, tc.dir)
			if same != tc.same {
				t.Errorf("AllowsBelow(%s, %s): same %v, want %v", p, tc.dir, same, tc.same)
				continue
			}
			if !same {
				continue
			}
			for _, n := range below {
				want := rs.Allows(FileTriple(p, tc.dir+"/"+n))
				if d.Allowed != want.Allowed || d.Intent != want.Intent || d.Declared != want.Declared {
					t.Errorf("AllowsBelow(%s, %s) = %+v, Allows of %s = %+v", p, tc.dir, d, n, want)
				}
			}
		}
	}
}
