package app_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/web/session"
)

// loginFrom signs in through the reverse proxy at the test server's peer
// address, which says the client is at xff.
func (b *browser) loginFrom(xff, org, user, password string) page {
	b.c.t.Helper()
	// A new sign-in, as after the session ended: the browser keeps its
	// other cookies.
	root, _ := url.Parse(b.c.srv.URL + "/")
	b.jar.SetCookies(root, []*http.Cookie{{Name: session.CookieName, Path: "/", MaxAge: -1}})
	p := b.get("/login")
	if p.status != http.StatusOK {
		b.c.t.Fatalf("GET /login: %d", p.status)
	}
	form := url.Values{"org": {org}, "username": {user}, "password": {password},
		"csrf_token": {inputValue(b.c.t, p.doc, "csrf_token")}}
	return b.post("/login", form, "X-Forwarded-For", xff)
}

func (b *browser) deviceCookie() string {
	u, _ := url.Parse(b.c.srv.URL + "/login")
	for _, c := range b.jar.Cookies(u) {
		if c.Name == session.DeviceCookieName {
			return c.Value
		}
	}
	return ""
}

// Behind a trusted reverse proxy, an attacker hammering alice's account
// from many addresses, then twenty random names from the proxy's shared
// address, cannot stop reviewers whose browsers signed in before.
func TestSignInUnderAttackBehindAProxy(t *testing.T) {
	t.Parallel()
	c := openConsole(t, func(cfg *app.Config) {
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})
	alice, admin := c.browser(), c.browser()
	wantStatus(t, "alice signs in", alice.loginFrom("198.51.100.10", "demo", "alice", c.creds.ReviewerPassword), http.StatusSeeOther)
	wantStatus(t, "admin signs in", admin.loginFrom("198.51.100.11", "demo", "admin", c.creds.AdminPassword), http.StatusSeeOther)
	if alice.deviceCookie() == "" {
		t.Fatal("no remembered-device cookie after a successful sign-in")
	}

	attacker := c.browser()
	for i := range 40 {
		attacker.loginFrom(fmt.Sprintf("203.0.113.%d", i+1), "demo", "alice", fmt.Sprintf("guess-%d", i))
	}
	const shared = "192.0.2.99" // the office's address, as the proxy sees it
	for i := range 20 {
		wantStatus(t, "random name", attacker.loginFrom(shared, "demo", fmt.Sprintf("user%d", i), "x"), http.StatusUnauthorized)
	}

	// Unknown browsers are held back: alice's account waits, and the
	// shared address is over its limit.
	wantStatus(t, "alice from a new browser", c.browser().loginFrom("198.51.100.12", "demo", "alice", c.creds.ReviewerPassword),
		http.StatusTooManyRequests)
	wantStatus(t, "admin from a new browser at the shared address", c.browser().loginFrom(shared, "demo", "admin", c.creds.AdminPassword),
		http.StatusTooManyRequests)

	// Their own browsers, at the same shared address, are not.
	wantStatus(t, "alice's browser", alice.loginFrom(shared, "demo", "alice", c.creds.ReviewerPassword), http.StatusSeeOther)
	wantStatus(t, "admin's browser", admin.loginFrom(shared, "demo", "admin", c.creds.AdminPassword), http.StatusSeeOther)
	if alice.cookie(session.CookieName) == "" {
		t.Error("alice has no session")
	}

	// A forged device cookie is worth nothing.
	forged := c.browser()
	u, _ := url.Parse(c.srv.URL + "/login")
	forged.jar.SetCookies(u, []*http.Cookie{{Name: session.DeviceCookieName, Value: alice.deviceCookie() + "x", Path: "/login"}})
	wantStatus(t, "forged device cookie", forged.loginFrom("198.51.100.13", "demo", "alice", c.creds.ReviewerPassword),
		http.StatusTooManyRequests)
}

// Without trusted proxies X-Forwarded-For is ignored: an attacker rotating
// spoofed addresses from one connection address is limited as that address.
func TestSpoofedForwardedForIsIgnored(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	attacker := c.browser()
	for i := range 20 {
		wantStatus(t, "random name", attacker.loginFrom(fmt.Sprintf("203.0.113.%d", i+1), "demo", fmt.Sprintf("user%d", i), "x"),
			http.StatusUnauthorized)
	}
	wantStatus(t, "21st attempt with yet another spoofed address",
		attacker.loginFrom("198.51.100.200", "demo", "admin", c.creds.AdminPassword), http.StatusTooManyRequests)
}
