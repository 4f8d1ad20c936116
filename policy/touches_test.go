package policy

import (
	"strings"
	"testing"
)

func toolManifest(t *testing.T, workdir, tools string) (*Manifest, error) {
	t.Helper()
	wd := ""
	if workdir != "" {
		wd = "workdir: " + workdir + "\n"
	}
	return Parse("m.yaml", []byte(`apiVersion: klock/v1
agent: {id: a1}
`+wd+`intents: []
declared_tools:
`+tools+`
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.5, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
`))
}

// touches: ${workdir} expands; absent (opaque) and [] (nothing here) stay
// apart; PROC, a changing touch of a READ tool, NET DELETES and ${workdir}
// without a workdir are refused.
func TestToolTouches(t *testing.T) {
	m, err := toolManifest(t, "/srv/repo", `  - {name: db, blast_radius: local, side_effects: IRREVERSIBLE-WRITE, touches: ["MUTATES FILE:${workdir}/db/**", "CONSUMES NET:db.internal:5432/tcp"]}
  - {name: saas, blast_radius: domain, side_effects: IRREVERSIBLE-WRITE, touches: []}
  - {name: opaque, blast_radius: local, side_effects: IRREVERSIBLE-WRITE}`)
	if err != nil {
		t.Fatal(err)
	}
	db := m.DeclaredTools[0].Touches
	if len(db) != 2 || db[0].String() != "MUTATES FILE:/srv/repo/db/**" || db[1].String() != "CONSUMES NET:db.internal:5432/tcp" {
		t.Fatalf("db touches %v", db)
	}
	if m.DeclaredTools[1].Touches == nil || len(m.DeclaredTools[1].Touches) != 0 {
		t.Fatalf("touches: [] read as %#v, want an empty list (touches nothing)", m.DeclaredTools[1].Touches)
	}
	if m.DeclaredTools[2].Touches != nil {
		t.Fatalf("absent touches read as %#v, want nil (opaque)", m.DeclaredTools[2].Touches)
	}
	for _, tc := range []struct{ workdir, tool, want string }{
		{"/srv/repo", `  - {name: t, blast_radius: local, side_effects: IRREVERSIBLE-WRITE, touches: ["PROVIDES PROC:/usr/bin/make"]}`, "nothing leases a PROC"},
		{"/srv/repo", `  - {name: t, blast_radius: read, side_effects: READ, touches: ["DELETES FILE:${workdir}/tmp/**"]}`, "side_effects say READ"},
		{"/srv/repo", `  - {name: t, blast_radius: local, side_effects: IRREVERSIBLE-WRITE, touches: ["DELETES NET:db:5432"]}`, "no meaning on a network object"},
		{"", `  - {name: t, blast_radius: local, side_effects: IRREVERSIBLE-WRITE, touches: ["MUTATES FILE:${workdir}/x"]}`, "no workdir"},
		{"/srv/repo", `  - {name: t, blast_radius: local, side_effects: IRREVERSIBLE-WRITE, touches: "MUTATES FILE:/x"}`, "want a list"},
	} {
		if _, err := toolManifest(t, tc.workdir, tc.tool); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.tool, err, tc.want)
		}
	}
	m, err = toolManifest(t, "/srv/repo", `  - {name: t, blast_radius: local, side_effects: IRREVERSIBLE-WRITE, touches: ["MUTATES FILE:/dev/null"]}`)
	if err != nil || len(m.Warnings) == 0 || !strings.Contains(m.Warnings[0].Problem, "never leased") {
		t.Fatalf("/dev touch: %v %v, want a warning", err, m.Warnings)
	}
}

func TestSchemaDescribesTouches(t *testing.T) {
	js, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"touches": {`) || !strings.Contains(string(js), "leased for the call's duration") {
		t.Fatal("schema lacks declared_tools[].touches")
	}
}
