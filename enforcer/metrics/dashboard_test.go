//go:build linux

package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboard is the part of Grafana's dashboard JSON model the test reads.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name, Type string
			Query      any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type, UID string
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// metricRef is a klock metric's name in a PromQL expression.
var metricRef = regexp.MustCompile(`\bklock_[a-z0-9_]+`)

// The Grafana dashboard parses as a dashboard with a Prometheus
// datasource variable that every panel queries through; every metric it
// queries is one klockd registers (a histogram by its _bucket series),
// and every metric klockd registers is on it.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/klock-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("deploy/grafana/klock-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("not a dashboard: title %q uid %q schemaVersion %d, %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name, Type string
		Query      any `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("no Prometheus datasource variable named datasource")
	}
	names := Names()
	queried := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.GridPos == nil || p.GridPos.W == 0 {
			t.Errorf("panel %q: duplicate id %d or no gridPos", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q does not query the datasource variable", p.Title)
		}
		for _, tg := range p.Targets {
			for _, ref := range metricRef.FindAllString(tg.Expr, -1) {
				name := strings.TrimSuffix(ref, "_bucket")
				if !slices.Contains(names, name) {
					t.Errorf("panel %q queries %s, which klockd does not register", p.Title, ref)
				}
				queried[name] = true
			}
		}
	}
	for _, n := range names {
		if !queried[n] {
			t.Errorf("%s is on no panel", n)
		}
	}
}
