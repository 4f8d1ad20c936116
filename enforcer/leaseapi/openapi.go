//go:build linux

package leaseapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's OpenAPI 3 description (openapi.yaml).
//
//go:embed openapi.yaml
var OpenAPI []byte

// openapi is GET /v1/openapi.yaml.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request, _ Identity) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
}
