package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/countersign/countersign/handlers/api"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

func TestListTools(t *testing.T) {
	srv := newServer(t, newFake())
	for _, format := range []string{"", "countersign", "openai", "anthropic"} {
		t.Run("format="+format, func(t *testing.T) {
			path := "/api/v1/tools"
			if format != "" {
				path += "?format=" + format
			}
			r := do(t, srv, request{method: "GET", path: path, key: "key-a"})
			if r.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", r.StatusCode, r.body)
			}
			f, _ := registry.ParseExportFormat(format)
			want, err := registry.Demo().Export(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.body, want) {
				t.Errorf("body differs from the registry's export:\n%s", r.body)
			}
			if got := r.Header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control %q", got)
			}
		})
	}
	r := do(t, srv, request{method: "GET", path: "/api/v1/tools?format=yaml", key: "key-a"})
	wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, "format")
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	srv := newServer(t, newFake())
	r := do(t, srv, request{method: "GET", path: "/api/v1/openapi.json"})
	if r.StatusCode != http.StatusOK {
		t.Fatalf("status %d", r.StatusCode)
	}
	if !bytes.Equal(r.body, api.OpenAPIDocument()) {
		t.Error("the served document is not the checked-in one")
	}
	if !bytes.Contains(r.body, []byte(`"openapi": "3.1.0"`)) {
		t.Error("not an OpenAPI 3.1 document")
	}
}
