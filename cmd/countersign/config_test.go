package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models/registry"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "countersign.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigPrecedence: the file sets flags; the environment wins over the
// file and the command line over both, lists included.
func TestConfigPrecedence(t *testing.T) {
	path := writeConfig(t, `
# countersign serve settings
addr: 127.0.0.1:1
db: sqlite://from-file.db
idle-timeout: 5m
secure: true
origin:
  - https://a.example
  - https://b.example
rp-name: from file
`)
	cmd := newCommand("serve", "countersign serve [flags]", "", io.Discard)
	var addr, db, rpName string
	var idle time.Duration
	var secure bool
	var origins listFlag
	cmd.fs.StringVar(&addr, "addr", "", "")
	cmd.fs.StringVar(&db, "db", "", "")
	cmd.fs.StringVar(&rpName, "rp-name", "", "")
	cmd.fs.DurationVar(&idle, "idle-timeout", 0, "")
	cmd.fs.BoolVar(&secure, "secure", false, "")
	cmd.fs.Var(&origins, "origin", "")
	configFileFlag(cmd.fs)
	env := envOf(map[string]string{"COUNTERSIGN_DB": "sqlite://from-env.db", "COUNTERSIGN_ORIGIN": "https://env.example"})
	if _, err := cmd.parse([]string{"--config", path, "--addr", "127.0.0.1:9"}, env); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"addr (command line over file)", addr, "127.0.0.1:9"},
		{"db (environment over file)", db, "sqlite://from-env.db"},
		{"rp-name (file)", rpName, "from file"},
		{"idle-timeout (file)", idle.String(), "5m0s"},
		{"origin (environment replaces the file's list)", origins.String(), "https://env.example"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if !secure {
		t.Error("secure: true in the file was not applied")
	}

	// COUNTERSIGN_CONFIG names the file too; a list from the file stays
	// when nothing else sets it.
	cmd2 := newCommand("serve", "countersign serve [flags]", "", io.Discard)
	var origins2 listFlag
	cmd2.fs.Var(&origins2, "origin", "")
	cmd2.fs.String("addr", "", "")
	cmd2.fs.String("db", "", "")
	cmd2.fs.String("rp-name", "", "")
	cmd2.fs.Duration("idle-timeout", 0, "")
	cmd2.fs.Bool("secure", false, "")
	configFileFlag(cmd2.fs)
	if _, err := cmd2.parse(nil, envOf(map[string]string{"COUNTERSIGN_CONFIG": path})); err != nil {
		t.Fatal(err)
	}
	if got, want := origins2.String(), "https://a.example,https://b.example"; got != want {
		t.Errorf("origin from the file = %q, want %q", got, want)
	}
}

// TestServeWithConfigFile starts the server from a file and checks that
// a setting from it is live, and that the environment overrides it.
func TestServeWithConfigFile(t *testing.T) {
	path := writeConfig(t, "addr: 127.0.0.1:0\ndb: "+tempDB(t)+"\nmetrics-token: file-token\nlog-level: warn\n")
	b, _, stop := startServer(t, nil, false, "--config", path)
	if r := call(t, "GET", b.url+"/metrics", "file-token", "", nil); r.status != http.StatusOK {
		t.Errorf("/metrics with the file's token: %d", r.status)
	}
	stop()
	b, _, _ = startServer(t, map[string]string{"COUNTERSIGN_METRICS_TOKEN": "env-token"}, false, "--config="+path)
	if r := call(t, "GET", b.url+"/metrics", "file-token", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("/metrics with the file's token when the environment set another: %d, want 401", r.status)
	}
	if r := call(t, "GET", b.url+"/metrics", "env-token", "", nil); r.status != http.StatusOK {
		t.Errorf("/metrics with the environment's token: %d", r.status)
	}
}

func TestConfigCheck(t *testing.T) {
	good := writeConfig(t, "addr: 0.0.0.0:8080\ndb: postgres://cs@db/cs\nbase-url: https://approve.example.com\nidle-timeout: 20m\norigin: [https://approve.example.com]\n")
	r := mustExec(t, nil, "", "config", "check", "--config", good)
	if !strings.Contains(r.stdout, "ok") {
		t.Errorf("config check of a good file printed %q", r.stdout)
	}
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "addr: 127.0.0.1:8080\nbase_url: https://x.example\n",
			[]string{"line 2", `unknown key "base_url"`, "did you mean base-url"}},
		{"wrong type", "db: sqlite://x.db\nidle-timeout: soon\n", []string{"line 2", "idle-timeout", `"soon"`, "want a duration"}},
		{"not a bool", "secure: maybe\n", []string{"line 1", "secure", `"maybe"`}},
		{"list for a single value", "addr:\n  - a\n  - b\n", []string{"line 2", "addr: takes one value, not a list"}},
		{"nested", "db:\n  url: sqlite://x.db\n", []string{"line 2", "db: takes a single value"}},
		{"twice", "addr: a:1\nrp-name: x\naddr: b:2\n", []string{"line 3", `"addr" is given twice (first on line 1)`}},
		{"not yaml", "addr: [unclosed\n", []string{"not valid YAML"}},
		{"not a mapping", "- addr\n", []string{"line 1", "mapping"}},
		{"no value", "addr:\n", []string{"line 1", "addr: no value"}},
		{"inconsistent", "idle-timeout: 2h\nabsolute-timeout: 1h\n", []string{"--idle-timeout must be positive and no longer than --absolute-timeout"}},
		{"bad base url", "base-url: ftp://x\n", []string{"--base-url"}},
		{"bad otlp endpoint", "otlp-endpoint: collector:4318\n", []string{"OTLP endpoint", "http"}},
		{"missing kek file", "kek-file: /nonexistent/kek\n", []string{"key-encryption key file"}},
		{"config in config", "config: other.yaml\n", []string{`unknown key "config"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			r := invoke(t, nil, "", "config", "check", "--config", path)
			if r.err == nil {
				t.Fatalf("config check accepted:\n%s", tc.body)
			}
			msg, _ := reported(r.err)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not contain %q", msg, w)
				}
			}
			// serve refuses the same file at start, with the same message.
			sr := invoke(t, nil, "", "serve", "--config", path, "--addr", "127.0.0.1:0", "--db", tempDB(t))
			if sr.err == nil {
				t.Fatal("serve started with a bad configuration file")
			}
		})
	}
	if r := invoke(t, nil, "", "config", "check", "--config", filepath.Join(t.TempDir(), "missing.yaml")); r.err == nil {
		t.Error("config check of a missing file passed")
	}
}

// TestConfigCheckAppliesStartRules: config check refuses what serve refuses
// at start, short of opening the database or listening, and says at which
// line of the file; serve refuses the file with the same message.
func TestConfigCheckAppliesStartRules(t *testing.T) {
	dir := t.TempDir()
	malformed := filepath.Join(dir, "malformed.yaml")
	invalid := filepath.Join(dir, "invalid.yaml")
	for p, body := range map[string]string{malformed: "tools: [unclosed\n", invalid: "tools: []\n"} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db := "db: " + tempDB(t) + "\n"
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"db scheme", "addr: 127.0.0.1:0\ndb: mysql://x\n", []string{"line 2", "--db", "sqlite:// or postgres://"}},
		{"sqlite without a path", "addr: 127.0.0.1:0\ndb: sqlite://\n", []string{"line 2", "--db", "needs a path"}},
		{"addr", db + "addr: notanaddress\n", []string{"line 2", "--addr", `"notanaddress" is not HOST:PORT`}},
		{"addr port", db + "addr: 127.0.0.1:99999\n", []string{"line 2", "--addr", "is not a port"}},
		{"metrics addr", db + "addr: 127.0.0.1:0\nmetrics-addr: nine\n", []string{"line 3", "--metrics-addr"}},
		{"missing tools", db + "addr: 127.0.0.1:0\ntools: /nonexistent.yaml\n", []string{"line 3", "--tools", "no such file"}},
		{"malformed tools", db + "addr: 127.0.0.1:0\ntools: " + malformed + "\n", []string{"line 3", "--tools", malformed}},
		{"invalid tools", db + "addr: 127.0.0.1:0\ntools: " + invalid + "\n", []string{"line 3", "--tools", "no tools declared"}},
		{"missing fido metadata", db + "addr: 127.0.0.1:0\nfido-mds: /nonexistent\n", []string{"line 3", "--fido-mds", "no such file"}},
		{"unparsable base url", db + "addr: 127.0.0.1:0\nbase-url: \"ftp://x y\"\n", []string{"line 3", "--base-url"}},
		{"missing kek file", db + "addr: 127.0.0.1:0\nkek-file: /nonexistent/kek\n", []string{"line 3", "key-encryption key file"}},
		{"inconsistent", db + "addr: 127.0.0.1:0\nidle-timeout: 2h\nabsolute-timeout: 1h\n", []string{"line 3", "--idle-timeout must be"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			r := invoke(t, nil, "", "config", "check", "--config", path)
			if r.err == nil {
				t.Fatalf("config check accepted:\n%s", tc.body)
			}
			msg, code := reported(r.err)
			for _, w := range append(tc.want, "config "+path) {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not contain %q", msg, w)
				}
			}
			// A mistake in the file is not one on the command line: no usage.
			if code != exitError || strings.Contains(msg, "usage:") {
				t.Errorf("exit status %d, message %q; want 1 and no usage", code, msg)
			}
			sr := invoke(t, nil, "", "serve", "--config", path)
			if sr.err == nil {
				t.Fatal("serve started with a bad configuration file")
			}
			if got, _ := reported(sr.err); got != msg {
				t.Errorf("serve said %q, config check %q", got, msg)
			}
		})
	}
}

// TestConfigCheckReportsEveryProblem: one run names every mistake in the
// file, in the order of its lines; the command line overrides the file's
// value and with it the problem.
func TestConfigCheckReportsEveryProblem(t *testing.T) {
	path := writeConfig(t, "addr: nowhere\ndb: mysql://x\nrp-name: fine\nfido-mds: /nonexistent\n")
	r := invoke(t, nil, "", "config", "check", "--config", path)
	msg, _ := reported(r.err)
	want := []string{"3 problems", "line 1: --addr", "line 2: --db", "line 4: --fido-mds"}
	last := -1
	for _, w := range want {
		i := strings.Index(msg, w)
		if i < 0 || i < last {
			t.Errorf("message %q does not contain %q after the problems before it", msg, w)
		}
		last = i
	}
	// serve with --db on the command line: the file's db is no problem, and
	// the others keep their lines.
	sr := invoke(t, nil, "", "serve", "--config", path, "--db", tempDB(t))
	msg, _ = reported(sr.err)
	if !strings.Contains(msg, "2 problems") || strings.Contains(msg, "--db") || !strings.Contains(msg, "line 4: --fido-mds") {
		t.Errorf("serve with --db over the file's: %q", msg)
	}
	// A bad value on the command line is a usage error, as before.
	sr = invoke(t, nil, "", "serve", "--config", path, "--addr", "nowhere-else")
	if msg, code := reported(sr.err); code != exitUsage || !strings.Contains(msg, `--addr: "nowhere-else"`) {
		t.Errorf("serve --addr nowhere-else: status %d, %q", code, msg)
	}
}

// TestConfigCheckRelyingParty: a relying party id the origins are not
// within is refused by config check as by serve, whether the origins are
// given or come from --base-url, so that security keys do not first fail
// in a reviewer's browser.
func TestConfigCheckRelyingParty(t *testing.T) {
	db := "db: " + tempDB(t) + "\naddr: 127.0.0.1:0\n"
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"origin outside the id", db + "rp-id: example.com\norigin: [https://approve.example.org]\n",
			[]string{`"https://approve.example.org"`, `relying party id "example.com"`}},
		{"base url outside the id", db + "base-url: https://approve.example.org\nrp-id: example.com\n",
			[]string{`"https://approve.example.org"`, `relying party id "example.com"`}},
		{"an address as the id", db + "rp-id: 10.0.0.5\norigin: [https://10.0.0.5]\n",
			[]string{"--rp-id", `"10.0.0.5"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			r := invoke(t, nil, "", "config", "check", "--config", path)
			if r.err == nil {
				t.Fatalf("config check accepted:\n%s", tc.body)
			}
			msg, _ := reported(r.err)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not contain %q", msg, w)
				}
			}
			sr := invoke(t, nil, "", "serve", "--config", path)
			if got, _ := reported(sr.err); sr.err == nil || got != msg {
				t.Errorf("serve said %q (%v), config check %q", got, sr.err, msg)
			}
		})
	}
	for _, body := range []string{
		db + "rp-id: example.com\norigin: [https://approve.example.com, https://example.com:8443]\n",
		db + "base-url: https://approve.example.com\n",
		db + "base-url: http://127.0.0.1:8080\n",
	} {
		if r := invoke(t, nil, "", "config", "check", "--config", writeConfig(t, body)); r.err != nil {
			t.Errorf("config check refused:\n%s\n%v", body, r.err)
		}
	}
}

// TestConfigCheckWithTheEnvironment: config check reads the file alone,
// and says which secrets serve will read from the environment; with --env
// it reads the environment as serve does, the adapters' HMAC secrets
// included, and refuses what serve would refuse at start.
func TestConfigCheckWithTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	yaml := strings.Replace(string(registry.DemoYAML()), "adapter: {kind: demo_ledger}",
		"adapter: {kind: http, base_url: http://127.0.0.1:9, secret_env: BIZ_SECRET, timeout: 10s}", 1)
	if err := os.WriteFile(tools, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "addr: 127.0.0.1:0\ndb: "+tempDB(t)+"\ntools: "+tools+"\n")
	r := mustExec(t, nil, "", "config", "check", "--config", path)
	if !strings.Contains(r.stdout, "ok") || !strings.Contains(r.stdout, "BIZ_SECRET") {
		t.Errorf("config check of the file alone printed %q, want ok and the variable serve will read", r.stdout)
	}
	good := "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" when it passes
	}{
		{"unset", nil, "environment variable BIZ_SECRET"},
		{"too short", map[string]string{"BIZ_SECRET": "short"}, "secret must be at least"},
		{"set", map[string]string{"BIZ_SECRET": good}, ""},
		{"a bad value in the environment", map[string]string{"BIZ_SECRET": good, "COUNTERSIGN_IDLE_TIMEOUT": "soon"},
			`COUNTERSIGN_IDLE_TIMEOUT="soon" (--idle-timeout): want a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := invoke(t, tc.env, "", "config", "check", "--env", "--config", path)
			if tc.want == "" {
				if r.err != nil || !strings.Contains(r.stdout, "ok") {
					t.Fatalf("config check --env: %v, %q", r.err, r.stdout)
				}
				return
			}
			msg, _ := reported(r.err)
			if r.err == nil || !strings.Contains(msg, tc.want) {
				t.Fatalf("config check --env: %q (%v), want it to mention %q", msg, r.err, tc.want)
			}
			sr := invoke(t, tc.env, "", "serve", "--config", path)
			if got, _ := reported(sr.err); sr.err == nil || !strings.Contains(got, tc.want) {
				t.Errorf("serve said %q (%v), want it to mention %q", got, sr.err, tc.want)
			}
		})
	}
}
