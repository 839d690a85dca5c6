package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/webauthntest"
)

func TestListFlag(t *testing.T) {
	parse := func(env map[string]string, args ...string) []string {
		t.Helper()
		var l listFlag
		cmd := newCommand("serve", "countersign serve", "", io.Discard)
		cmd.fs.Var(&l, "origin", "")
		if _, err := cmd.parse(args, envOf(env)); err != nil {
			t.Fatal(err)
		}
		return l.values
	}
	env := map[string]string{"COUNTERSIGN_ORIGIN": "https://a.example, https://b.example"}
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want []string
	}{
		{nil, nil, nil},
		{nil, []string{"--origin", "https://x.example", "--origin", "https://y.example,https://z.example"},
			[]string{"https://x.example", "https://y.example", "https://z.example"}},
		{env, nil, []string{"https://a.example", "https://b.example"}},
		// The command line replaces the environment's list.
		{env, []string{"--origin", "https://c.example"}, []string{"https://c.example"}},
	} {
		if got := parse(tt.env, tt.args...); !slices.Equal(got, tt.want) {
			t.Errorf("env %v args %v: %v, want %v", tt.env, tt.args, got, tt.want)
		}
	}
}

func TestServeChecksWebAuthnFlags(t *testing.T) {
	t.Parallel()
	r := invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--origin", "https://c.example/console")
	if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "--origin") {
		t.Errorf("an origin with a path: %v (exit %d), want a usage error", r.err, code)
	}
	r = invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--rp-id", "example.com", "--origin", "https://evil.example")
	if r.err == nil || !strings.Contains(r.err.Error(), "not within the relying party id") {
		t.Errorf("an origin outside the RP ID: %v", r.err)
	}
}

// A metadata BLOB that cannot be read, or that is not a BLOB signed under
// the FIDO root, stops serve before it serves.
func TestServeChecksTheFIDOMetadata(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "fido-mds.jwt")
	r := invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--fido-mds", missing)
	if r.err == nil || !strings.Contains(r.err.Error(), "FIDO metadata") || !strings.Contains(r.err.Error(), missing) {
		t.Errorf("a missing BLOB: %v", r.err)
	}
	if err := os.WriteFile(missing, []byte("eyJhbGciOiJub25lIn0.e30."), 0o600); err != nil {
		t.Fatal(err)
	}
	r = invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--fido-mds", missing)
	if r.err == nil || !strings.Contains(r.err.Error(), "does not verify") {
		t.Errorf("an unsigned BLOB: %v", r.err)
	}
}

// With a BLOB signed under the given root, serve starts and its banner
// says that only certified models are registered.
func TestServeBannerNamesTheAttestationPolicy(t *testing.T) {
	t.Parallel()
	m := webauthntest.NewMDS(t)
	blob := m.Blob("fido-mds.jwt", nil, map[[16]byte]string{{1}: "FIDO_CERTIFIED_L1", {2}: "FIDO_CERTIFIED"})
	_, out, _ := startServerStdout(t, nil, "--db", tempDB(t), "--addr", "127.0.0.1:0", "--fido-mds", blob, "--fido-mds-root", m.RootFile)
	if !strings.Contains(out(), "only models certified in the FIDO metadata (2 models, BLOB 7, next update 2099-01-01)") {
		t.Errorf("banner:\n%s", out())
	}
}

func TestServeChecksTrustedProxies(t *testing.T) {
	t.Parallel()
	r := invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--trusted-proxies", "10.0.0.0/8,proxy.example")
	if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "--trusted-proxies") ||
		!strings.Contains(r.err.Error(), "proxy.example") {
		t.Errorf("a host name as a trusted proxy: %v (exit %d), want a usage error", r.err, code)
	}
	r = invoke(t, map[string]string{"COUNTERSIGN_TRUSTED_PROXIES": "10.0.0.0/33"}, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0")
	if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "10.0.0.0/33") {
		t.Errorf("a bad prefix from the environment: %v (exit %d), want a usage error", r.err, code)
	}
}

func TestServeChecksWebhookAllow(t *testing.T) {
	t.Parallel()
	r := invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--webhook-allow", "10.20.0.0/16,hooks.internal")
	if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "--webhook-allow") ||
		!strings.Contains(r.err.Error(), "hooks.internal") {
		t.Errorf("a host name to allow webhooks to: %v (exit %d), want a usage error", r.err, code)
	}
	r = invoke(t, map[string]string{"COUNTERSIGN_WEBHOOK_ALLOW": "fd00::/129"}, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0")
	if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "fd00::/129") {
		t.Errorf("a bad prefix from the environment: %v (exit %d), want a usage error", r.err, code)
	}
}

func TestServeChecksOutboxRetention(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"30m", "-1h", "soon"} {
		r := invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--outbox-retention", bad)
		if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "outbox-retention") {
			t.Errorf("--outbox-retention %s: %v (exit %d), want a usage error", bad, r.err, code)
		}
	}
}
