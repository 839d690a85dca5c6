package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/kek"
)

func kekFile(t *testing.T) (string, *kek.KEK) {
	t.Helper()
	k, text, err := kek.Generate()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(p, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, k
}

// TestKeysAtRest walks an operator through encrypting an existing
// database: the banner warns without a KEK, rekey encrypts the keys, a
// start with the wrong KEK (or none) fails naming the KEK it needs, and
// a rekey to a new KEK needs the old one.
func TestKeysAtRest(t *testing.T) {
	db := tempDB(t)
	_, out, stop := startServerStdout(t, nil, "--addr", "127.0.0.1:0", "--db", db)
	if !strings.Contains(out(), "WARNING:  keys (token signing, cookies) are stored unencrypted") {
		t.Errorf("no warning about plain keys in the banner:\n%s", out())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	k1File, k1 := kekFile(t)
	r := mustExec(t, nil, "", "keys", "rekey", "--db", db, "--kek-file", k1File)
	if !strings.Contains(r.stdout, "3 keys encrypted under key-encryption key "+k1.ID()) {
		t.Errorf("rekey printed %q", r.stdout)
	}

	// The right KEK, from the environment: no warning.
	_, out, stop = startServerStdout(t, map[string]string{"COUNTERSIGN_KEK_FILE": k1File}, "--addr", "127.0.0.1:0", "--db", db)
	if strings.Contains(out(), "WARNING") {
		t.Errorf("a warning with every key encrypted:\n%s", out())
	}
	stop()
	// COUNTERSIGN_KEK carries the key itself.
	text, _ := os.ReadFile(k1File)
	if r := invoke(t, map[string]string{"COUNTERSIGN_KEK": string(text)}, "", "keys", "rotate", "--db", db); r.err != nil {
		t.Errorf("keys rotate with COUNTERSIGN_KEK: %v", r.err)
	}
	if r := invoke(t, nil, "", "keys", "rotate", "--db", db); r.err == nil || !strings.Contains(r.err.Error(), "--kek-file") {
		t.Errorf("keys rotate without the KEK: %v", r.err)
	}

	k2File, k2 := kekFile(t)
	for name, env := range map[string]map[string]string{
		"wrong KEK": {"COUNTERSIGN_KEK_FILE": k2File},
		"no KEK":    nil,
	} {
		ctx, cancel := context.WithCancel(context.Background())
		err := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db}, envOf(env), strings.NewReader(""), &syncBuffer{}, &syncBuffer{})
		cancel()
		if err == nil || !strings.Contains(err.Error(), k1.ID()) {
			t.Errorf("%s: serve = %v; want a refusal naming KEK %s", name, err, k1.ID())
		}
	}

	// To a new KEK: the old one is needed.
	if r := invoke(t, nil, "", "keys", "rekey", "--db", db, "--kek-file", k2File); r.err == nil {
		t.Error("rekey without the old KEK passed")
	}
	r = mustExec(t, nil, "", "keys", "rekey", "--db", db, "--kek-file", k2File, "--old-kek-file", k1File)
	if !strings.Contains(r.stdout, "4 keys encrypted under key-encryption key "+k2.ID()) {
		t.Errorf("rekey printed %q", r.stdout)
	}
	_, _, stop = startServerStdout(t, map[string]string{"COUNTERSIGN_KEK_FILE": k2File}, "--addr", "127.0.0.1:0", "--db", db)
	stop()
}

// startServerStdout is startServer without demo data, also returning what
// the server printed on stdout.
func startServerStdout(t *testing.T, env map[string]string, args ...string) (banner, func() string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), envOf(env), strings.NewReader(""), stdout, stderr)
	}()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	waitFor(t, 30*time.Second, "the banner", func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("serve returned early: %v\n%s", err, stderr.String())
		default:
		}
		return strings.Contains(stdout.String(), "Tools:")
	})
	return banner{url: bannerURL.FindStringSubmatch(stdout.String())[1]}, stdout.String, stop
}

// A start without demo data says what the database holds: nothing yet
// (and how to begin), or its organizations and where to sign in.
func TestBannerNamesTheOrganizations(t *testing.T) {
	db := tempDB(t)
	for _, c := range []struct {
		tenants []string
		want    string
	}{
		{nil, "No organization yet (--demo is off). Create a tenant"},
		{[]string{"acme"}, "1 organization (acme): sign in at http://"},
		{[]string{"globex", "initech", "umbrella"}, "4 organizations (acme, globex, initech and 1 more): sign in at"},
	} {
		for _, name := range c.tenants {
			mustExec(t, nil, "", "tenant", "create", name, "--db", db)
		}
		_, out, stop := startServerStdout(t, nil, "--addr", "127.0.0.1:0", "--db", db)
		waitFor(t, 10*time.Second, "the organizations line", func() bool { return strings.Contains(out(), "--demo") })
		if !strings.Contains(out(), c.want) {
			t.Errorf("banner lacks %q:\n%s", c.want, out())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}
