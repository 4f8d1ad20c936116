//go:build linux

package metrics

import (
	"regexp"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// descName reads a metric's name out of its description, which has no
// getter for it (client_golang's Desc.String: `Desc{fqName: "name", ...`).
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names are the names of klock's metric families, sorted: those New
// registers and those the BPF statistics add (EnableBPFStats). A
// histogram's series add _bucket, _sum and _count to its name.
func Names() []string {
	m := New()
	cs := append(m.own, newBPFCollector(nil))
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []string
	for d := range ch {
		if sm := descName.FindStringSubmatch(d.String()); sm != nil {
			out = append(out, sm[1])
		}
	}
	sort.Strings(out)
	return out
}
