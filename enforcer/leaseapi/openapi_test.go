//go:build linux

package leaseapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/klocklabs/klock/enforcer/lease"
	"go.yaml.in/yaml/v3"
)

type openapiDoc struct {
	OpenAPI    string                               `yaml:"openapi"`
	Paths      map[string]map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Enum       []string       `yaml:"enum"`
			Properties map[string]any `yaml:"properties"`
		} `yaml:"schemas"`
		Responses map[string]any `yaml:"responses"`
	} `yaml:"components"`
}

func loadOpenAPI(t *testing.T) (openapiDoc, any) {
	t.Helper()
	var doc openapiDoc
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var raw any
	if err := yaml.Unmarshal(OpenAPI, &raw); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	return doc, raw
}

// Every route the handler serves is in openapi.yaml, and every operation
// there is served.
func TestOpenAPICoversRoutes(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	var served, documented []string
	for _, r := range routes {
		served = append(served, r.method+" "+r.pattern)
	}
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(m)+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	if !slices.Equal(served, documented) {
		t.Fatalf("served %v\ndocumented %v", served, documented)
	}
	// And the handler really serves each of them (not a 404 or 405).
	s, err := New(Config{Store: lease.NewTable(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(t.Context())
	for _, r := range routes {
		if r.pattern == "/v1/events" {
			continue // a stream: served, never ends
		}
		path := strings.ReplaceAll(r.pattern, "{object}", "FILE:%2Fx")
		req := httptest.NewRequest(r.method, path, strings.NewReader("{}"))
		req = req.WithContext(WithIdentity(req.Context(), Identity{Tenant: "uid:1"}))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), "no such endpoint") || rec.Code == http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d %s", r.method, path, rec.Code, rec.Body)
		}
	}
}

// The error classes documented are the ones the code has, every $ref
// resolves, and the wire types' JSON fields are the schemas' properties.
func TestOpenAPISchemasMatchCode(t *testing.T) {
	doc, raw := loadOpenAPI(t)
	var codeClasses []string
	for c := range classes {
		codeClasses = append(codeClasses, string(c))
	}
	docClasses := slices.Clone(doc.Components.Schemas["ErrorClass"].Enum)
	slices.Sort(codeClasses)
	slices.Sort(docClasses)
	if !slices.Equal(codeClasses, docClasses) {
		t.Errorf("error classes: code %v, openapi %v", codeClasses, docClasses)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "$ref" {
					ref := e.(string)
					name, ok := strings.CutPrefix(ref, "#/components/schemas/")
					_, found := doc.Components.Schemas[name]
					if !ok {
						name, ok = strings.CutPrefix(ref, "#/components/responses/")
						_, found = doc.Components.Responses[name]
					}
					if !ok || !found {
						t.Errorf("unresolved $ref %s", ref)
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(raw)
	for name, v := range map[string]any{
		"ManifestRequest": manifestWire{}, "IntentMap": intentWire{}, "ManifestResponse": ManifestResponse{}, "Lease": Lease{},
		"Intent": Intent{}, "Unleased": Unleased{}, "Conflict": Conflict{}, "Holder": Holder{}, "HolderRef": HolderRef{},
		"Targets": Targets{}, "ItemResult": ItemResult{}, "HeartbeatResponse": HeartbeatResponse{}, "ReleaseResponse": ReleaseResponse{},
		"ReconcileResponse": ReconcileResponse{}, "RevokeRequest": RevokeRequest{}, "RevokeResponse": RevokeResponse{},
		"ListResponse": ListResponse{}, "StateResponse": StateResponse{}, "Contention": Contention{}, "Waiting": Waiting{},
		"ContentionResponse": ContentionResponse{}, "Event": Event{}, "Error": Error{},
	} {
		var fields []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		var props []string
		for p := range doc.Components.Schemas[name].Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: Go fields %v, openapi properties %v", name, fields, props)
		}
	}
}
