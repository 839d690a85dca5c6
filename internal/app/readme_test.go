package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
)

// readmeSnippet returns the fenced code block that follows the marker
// <!-- snippet: name --> in the README.
func readmeSnippet(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- snippet: " + regexp.QuoteMeta(name) + " -->\\s*```[a-z]*\\n(.*?)```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("README has no snippet %q", name)
	}
	return string(m[1])
}

// headerTransport sends fixed headers with every request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

// The README's MCP client configuration connects as written, once the
// placeholders name this server and its agent key.
func TestReadmeMCPConfigConnects(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	raw := readmeSnippet(t, "mcp-config")
	raw = strings.ReplaceAll(raw, "http://127.0.0.1:8080", c.srv.URL)
	raw = strings.ReplaceAll(raw, "csk_YOUR_AGENT_KEY", c.creds.AgentKey)
	var cfg struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("the snippet is not JSON: %v\n%s", err, raw)
	}
	server, ok := cfg.MCPServers["countersign"]
	if !ok || server.Type != "http" {
		t.Fatalf("config %+v", cfg)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "readme", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: server.URL,
		HTTPClient: &http.Client{Transport: headerTransport{headers: server.Headers, next: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "request_refund_order") {
		t.Errorf("tools %v", names)
	}
}

// The README's OpenAI snippet, run by Python against this server: it
// fetches strict function definitions and turns a tool call of the shape
// OpenAI returns into a proposal awaiting confirmation.
func TestReadmeOpenAISnippetProposes(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		testenv.SkipOrFail(t, "python3 is not installed: %v", err)
		return
	}
	c := openMCP(t)
	code := readmeSnippet(t, "openai-python") + `
import sys
assert all(t["type"] == "function" and t["function"]["strict"] is True for t in tools), tools
names = [t["function"]["name"] for t in tools]
assert "refund_order" in names, names
call = {"id": "call_abc123", "type": "function", "function": {"name": "refund_order",
        "arguments": json.dumps({"order_id": "ord_1009", "amount_minor": 500, "currency": "CNY", "reason": "late delivery"})}}
json.dump(propose(call), sys.stdout)
`
	file := filepath.Join(t.TempDir(), "snippet.py")
	if err := os.WriteFile(file, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, file)
	cmd.Env = append(os.Environ(), "COUNTERSIGN_URL="+c.srv.URL, "COUNTERSIGN_AGENT_KEY="+c.creds.AgentKey)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("python: %v\n%s", err, stderr)
	}
	var p struct {
		ID         string        `json:"id"`
		Status     models.Status `json:"status"`
		RequestKey string        `json:"request_key"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("output %s: %v", out, err)
	}
	if p.Status != models.StatusAwaitingConfirmation || p.RequestKey != "call-call_abc123" {
		t.Errorf("proposal %+v", p)
	}
	if st := c.status(p.ID); st != models.StatusAwaitingConfirmation {
		t.Errorf("stored status %s", st)
	}
}
