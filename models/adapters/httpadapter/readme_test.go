package httpadapter_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models/adapters/httpadapter"
)

// TestReadmePythonSnippets runs the README's Python verify and
// sign_response functions against this package: a request signed here
// verifies there, and an answer signed there verifies here.
func TestReadmePythonSnippets(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.SkipOrFail(t, "python3 is not installed: %v", err)
		return
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var snippets []string
	for _, block := range strings.Split(string(readme), "```python\n")[1:] {
		code, _, _ := strings.Cut(block, "```")
		if strings.Contains(code, "def verify(") || strings.Contains(code, "def sign_response(") {
			snippets = append(snippets, code)
		}
	}
	if len(snippets) != 2 {
		t.Fatalf("found %d of the 2 Python snippets in the README", len(snippets))
	}
	const ts = 1700000001
	body := `{"tool":"refund"}`
	reqSig := httpadapter.Sign(testSecret, ts, "POST", "/countersign/execute", "cs1_ab", []byte(body))
	harness := strings.Join(snippets, "\n") + `
import json, sys, time
time.time = lambda: ` + "1700000001" + `
args = json.load(sys.stdin)
secret = args["secret"].encode()
ok = verify(secret, "POST", "/countersign/execute",
            {"X-Countersign-Timestamp": "1700000001", "X-Countersign-Signature": args["sig"], "Idempotency-Key": "cs1_ab"},
            args["body"].encode())
bad = verify(secret, "POST", "/countersign/execute",
             {"X-Countersign-Timestamp": "1700000001", "X-Countersign-Signature": args["sig"], "Idempotency-Key": "cs1_other"},
             args["body"].encode())
print(json.dumps({"ok": ok, "bad": bad, "headers": sign_response(secret, 200, args["sig"], b'{"status":"succeeded"}')}))
`
	in, _ := json.Marshal(map[string]string{"secret": string(testSecret), "sig": reqSig, "body": body})
	cmd := exec.Command(py, "-c", harness)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var got struct {
		OK, Bad bool
		Headers map[string]string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python said %s: %v", out, err)
	}
	if !got.OK || got.Bad {
		t.Fatalf("README verify: genuine=%v, other key=%v", got.OK, got.Bad)
	}
	if want := httpadapter.SignResponse(testSecret, ts, 200, reqSig, []byte(`{"status":"succeeded"}`)); got.Headers["X-Countersign-Signature"] != want ||
		got.Headers["X-Countersign-Timestamp"] != "1700000001" {
		t.Fatalf("README sign_response = %v, want signature %s", got.Headers, want)
	}
}
