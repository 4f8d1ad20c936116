package policy

import (
	"fmt"
	"net/netip"
	"testing"
)

// bigManifest has n intents over a realistic tree: per-project subtrees,
// exact files, one-level directories, executables and network endpoints.
func bigManifest(n int) string {
	var in []string
	for i := 0; len(in) < n; i++ {
		in = append(in,
			fmt.Sprintf("CONSUMES FILE:/srv/p%d/**", i),
			fmt.Sprintf("MUTATES FILE:/srv/p%d/src/m%d/**", i, i),
			fmt.Sprintf("PROVIDES FILE:/srv/p%d/build/*", i),
			fmt.Sprintf("DELETES FILE:/srv/p%d/build/out%d.o", i, i),
			fmt.Sprintf("DEPENDS_ON FILE:/srv/p%d/go.mod", i),
			fmt.Sprintf("PROVIDES PROC:/opt/tools/t%d", i),
			fmt.Sprintf("CONSUMES NET:10.%d.%d.0/24:%d/tcp", i/256%256, i%256, 1000+i),
			fmt.Sprintf("RENAMES FILE:/srv/p%d/src/**", i),
		)
	}
	return manifest(in[:n], "")
}

func BenchmarkCompile1000(b *testing.B) {
	m, err := Parse("big.yaml", []byte(bigManifest(1000)))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse1000(b *testing.B) {
	src := []byte(bigManifest(1000))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse("big.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllows1000 measures one decision on a 1,000-intent ruleset over
// a mix of allowed and denied file queries at realistic depths.
func BenchmarkAllows1000(b *testing.B) {
	m, err := Parse("big.yaml", []byte(bigManifest(1000)))
	if err != nil {
		b.Fatal(err)
	}
	rs, err := Compile(m)
	if err != nil {
		b.Fatal(err)
	}
	queries := []Triple{
		FileTriple(Mutates, "/srv/p77/src/m77/pkg/deep/file.go"),
		FileTriple(Consumes, "/srv/p3/README.md"),
		FileTriple(Mutates, "/etc/hosts"),
		FileTriple(Deletes, "/srv/p99/build/out99.o"),
		FileTriple(Provides, "/srv/p12/build/new.o"),
		FileTriple(Consumes, "/usr/lib/x86_64-linux-gnu/libc.so.6"),
		ExecTriple("/opt/tools/t50"),
		FileTriple(Renames, "/home/user/.ssh/id_rsa"),
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = rs.Allows(queries[i%len(queries)])
		i++
	}
}

func BenchmarkAllowsNet1000(b *testing.B) {
	rs, err := Compile(mustParse(b, bigManifest(1000)))
	if err != nil {
		b.Fatal(err)
	}
	q := NetTriple(Consumes, netip.MustParseAddrPort("10.0.60.7:1060"), ProtoTCP)
	b.ReportAllocs()
	for b.Loop() {
		_ = rs.Allows(q)
	}
}
