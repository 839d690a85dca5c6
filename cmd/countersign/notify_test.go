package main

import (
	"context"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
)

func TestUserNotify(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", db)
	mustExec(t, nil, "correct horse battery\n", "user", "create", "--tenant", "acme", "--name", "bob", "--db", db)
	r := mustExec(t, nil, "", "user", "notify", "--tenant", "acme", "--name", "bob", "--email", "bob@example.com", "--db", db)
	if !strings.Contains(r.stdout, "bob@example.com") {
		t.Errorf("stdout %q", r.stdout)
	}
	if r := invoke(t, nil, "", "user", "notify", "--tenant", "acme", "--name", "bob", "--email", "not an address", "--db", db); !models.IsCode(r.err, models.EInvalidRequest) {
		t.Errorf("a bad address: %v", r.err)
	}
	if r := invoke(t, nil, "", "user", "notify", "--tenant", "acme", "--name", "nobody", "--email", "x@example.com", "--db", db); r.err == nil {
		t.Error("an unknown user got an address")
	}
	// Without --email the command tells the address and changes nothing;
	// an explicitly empty one removes it.
	notify := func(args ...string) string {
		t.Helper()
		return mustExec(t, nil, "", append([]string{"user", "notify", "--tenant", "acme", "--name", "bob", "--db", db}, args...)...).stdout
	}
	if got := notify(); got != "bob is notified at bob@example.com\n" {
		t.Errorf("without --email: %q", got)
	}
	if got := notify(); !strings.Contains(got, "bob@example.com") {
		t.Errorf("asking removed the address: %q", got)
	}
	if got := notify("--email", ""); got != "bob gets no e-mail notifications\n" {
		t.Errorf("--email \"\": %q", got)
	}
	if got := notify(); got != "bob gets no e-mail notifications\n" {
		t.Errorf("after the removal: %q", got)
	}
	ctx := context.Background()
	a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tn, _ := a.Store.TenantByName(ctx, "acme")
	rs, err := a.Store.NotificationRecipients(ctx, tn.ID, "prop_missing")
	if !models.IsCode(err, models.ENotFound) || rs != nil {
		t.Errorf("recipients of an unknown proposal: %v %v", rs, err)
	}
}

func TestServeRefusesHalfAMailConfiguration(t *testing.T) {
	t.Parallel()
	r := invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--smtp-addr", "127.0.0.1:25")
	if r.err == nil || !strings.Contains(r.err.Error(), "--smtp-from") {
		t.Errorf("--smtp-addr without --smtp-from: %v", r.err)
	}
	r = invoke(t, nil, "", "serve", "--db", tempDB(t), "--addr", "127.0.0.1:0", "--slack-webhook-url", "file:///etc/passwd")
	if r.err == nil || !strings.Contains(r.err.Error(), "slack-webhook-url") {
		t.Errorf("a file: Slack URL: %v", r.err)
	}
}
