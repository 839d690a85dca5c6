package events_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
)

// readmeSnippet returns the fenced code block that follows
// "<!-- snippet: name -->" in the README.
func readmeSnippet(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- snippet: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("README has no snippet %q", name)
	}
	return string(m[1])
}

// realDelivery sends one real, signed webhook to a local receiver and
// returns the secret, the headers and the body as received.
func realDelivery(t *testing.T) (string, http.Header, []byte) {
	e := newEnv(t, dbURL(t, "sqlite"), models.SystemClock{})
	ev := e.events(events.Config{})
	r := e.receiving(ev, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID})
	e.propose("ord_1001", 100)
	drain(t, ev)
	got := r.messages()
	if len(got) == 0 || got[0].Verified != nil {
		t.Fatalf("no verified delivery: %+v", got)
	}
	return r.secret, got[0].Header, got[0].Body
}

type snippetCase struct {
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Valid   bool              `json:"valid"`
}

// cases are the real delivery, and the same with a tampered body, another
// secret and another id, which must all be refused.
func cases(t *testing.T) []snippetCase {
	sec, h, body := realDelivery(t)
	headers := map[string]string{}
	for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		headers[k] = h.Get(k)
	}
	other, _ := events.NewSecret()
	otherID := map[string]string{}
	for k, v := range headers {
		otherID[k] = v
	}
	otherID["webhook-id"] = "evt_other"
	return []snippetCase{
		{Secret: sec, Headers: headers, Body: string(body), Valid: true},
		{Secret: sec, Headers: headers, Body: strings.Replace(string(body), `"revision":1`, `"revision":9`, 1), Valid: false},
		{Secret: other, Headers: headers, Body: string(body), Valid: false},
		{Secret: sec, Headers: otherID, Body: string(body), Valid: false},
	}
}

func TestReadmePythonVerifier(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		testenv.SkipOrFail(t, "python3 is not installed")
	}
	cs := cases(t)
	input, _ := json.Marshal(cs)
	prog := readmeSnippet(t, "verify-python") + `
import json, sys
for case in json.load(sys.stdin):
    try:
        verify_webhook(case["secret"], case["headers"], case["body"].encode())
        print("valid")
    except ValueError:
        print("refused")
`
	cmd := exec.Command(python, "-c", prog)
	cmd.Stdin = bytes.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	checkVerdicts(t, cs, string(out))
}

func TestReadmeGoVerifier(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.SkipOrFail(t, "the go command is not on PATH")
	}
	cs := cases(t)
	dir := t.TempDir()
	snippet := readmeSnippet(t, "verify-go")
	snippet = strings.Replace(snippet, "import (\n", "import (\n\t\"encoding/json\"\n\t\"fmt\"\n\t\"os\"\n", 1)
	prog := "package main\n\n" + snippet + `
func main() {
	var cases []struct {
		Secret  string            ` + "`json:\"secret\"`" + `
		Headers map[string]string ` + "`json:\"headers\"`" + `
		Body    string            ` + "`json:\"body\"`" + `
	}
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.Headers {
			h.Set(k, v)
		}
		if verifyWebhook(c.Secret, h, []byte(c.Body), time.Now(), 5*time.Minute) == nil {
			fmt.Println("valid")
		} else {
			fmt.Println("refused")
		}
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module verify\n\ngo 1.22\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	input, _ := json.Marshal(cs)
	cmd := exec.Command(goBin, "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	cmd.Stdin = bytes.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	checkVerdicts(t, cs, string(out))
}

func checkVerdicts(t *testing.T, cs []snippetCase, out string) {
	t.Helper()
	lines := strings.Fields(out)
	if len(lines) != len(cs) {
		t.Fatalf("output %q for %d cases", out, len(cs))
	}
	for i, c := range cs {
		want := "refused"
		if c.Valid {
			want = "valid"
		}
		if lines[i] != want {
			t.Errorf("case %d: %s, want %s", i, lines[i], want)
		}
	}
}
