package apitest_test

import (
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/web"
)

// Every route of the agent API the server registers has an operation in
// the document, so a new endpoint cannot ship undocumented even before a
// test calls it. HEAD answers as GET does and is not listed separately;
// OPTIONS, which the router answers on every route, is listed per path.
func TestEveryAPIRouteIsDocumented(t *testing.T) {
	doc := apitest.Document(t)
	e := web.NewServer(web.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		web.Deps{Tools: registry.Demo()})
	param := regexp.MustCompile(`:([A-Za-z_]+)`)
	seen := 0
	optionsReported := map[string]bool{}
	for _, r := range e.Routes() {
		if !apitest.Covered(r.Path) || r.Method == http.MethodHead || strings.Contains(r.Path, "*") {
			continue
		}
		seen++
		path := param.ReplaceAllString(r.Path, "{$1}")
		item := doc.Paths.Value(path)
		if item == nil || item.GetOperation(r.Method) == nil {
			t.Errorf("%s %s is served but not in handlers/api/openapi.json", r.Method, path)
		}
		// The router answers OPTIONS on every route it has (204, Allow).
		if item != nil && item.Options == nil && !optionsReported[path] {
			optionsReported[path] = true
			t.Errorf("OPTIONS %s is answered by the router but not in handlers/api/openapi.json", path)
		}
	}
	if seen < 5 {
		t.Fatalf("only %d API routes found; is the route table empty?", seen)
	}
}
