package events_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
)

// TestDestinationsRefuseWhatOnlyTheServerCanReach: loopback, private,
// link-local (the cloud metadata service), special-purpose and IPv6 forms
// of them (mapped, translated, 6to4) are refused; public addresses pass,
// and so does a range the operator allows.
func TestDestinationsRefuseWhatOnlyTheServerCanReach(t *testing.T) {
	t.Parallel()
	refused := []string{
		"127.0.0.1", "127.8.9.10", "::1", "10.0.0.5", "172.16.3.4", "192.168.1.1", "fd00::1",
		"169.254.169.254", "fe80::1", "0.0.0.0", "::", "0.1.2.3", "100.64.0.1", "192.0.0.8",
		"198.18.0.1", "224.0.0.1", "ff02::1", "255.255.255.255", "240.0.0.1",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1", "2002:7f00:1::1", "2001::1",
		"192.0.2.10", "2001:db8::1", "fec0::1",
		// IPv4-compatible and IPv4-translated forms of loopback, the
		// other documentation range, SRv6, the 6to4 relay anycast.
		"::127.0.0.1", "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "3fff::1", "3fff:fff:ffff::1", "5f00::1", "192.88.99.1",
	}
	public := []string{"93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8"}
	var d events.Destinations
	for _, a := range refused {
		err := d.Check(netip.MustParseAddr(a))
		if err == nil {
			t.Errorf("%s is allowed", a)
			continue
		}
		if !strings.Contains(err.Error(), "--webhook-allow") {
			t.Errorf("%s: %v does not say how to allow it", a, err)
		}
	}
	for _, a := range public {
		if err := d.Check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	allowed := events.Destinations{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("::1/128")}}
	for _, a := range []string{"10.20.3.4", "::1"} {
		if err := allowed.Check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("allowed %s: %v", a, err)
		}
	}
	for _, a := range []string{"10.21.0.1", "127.0.0.1", "169.254.169.254"} {
		if err := allowed.Check(netip.MustParseAddr(a)); err == nil {
			t.Errorf("%s is allowed by a list without it", a)
		}
	}
}

// TestEndpointsNamingARefusedAddressAreRefused: an endpoint whose host is
// a refused address, or localhost, is refused at registration with
// invalid_request on /url; a name is accepted (it is checked when a
// delivery connects), and so is an allowed range.
func TestEndpointsNamingARefusedAddressAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dbURL(t, "sqlite"), models.SystemClock{})
	strict := e.strictEvents(events.Config{})
	scope := models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}
	for _, u := range []string{
		"http://127.0.0.1:8080/hook", "http://[::1]/hook", "https://localhost/hook", "http://LOCALHOST.:9000/",
		"http://admin.localhost/", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/", "http://[::ffff:127.0.0.1]/",
		"http://0.0.0.0:8080/", "http://[fe80::1%25eth0]/", "http://[fd12::1]:443/",
		// IPv4 addresses in shorthand forms, refused before any name lookup.
		"http://2130706433/", "http://0x7f000001/", "http://0X7F000001/", "http://0/", "http://127.1/",
		"http://0177.0.0.1/", "http://127.000.000.001/", "http://1.1.1.0x1/", "http://8.8.8.010/", "http://134744072./",
		// Refused in the URL, as IPv6 forms of loopback.
		"http://[::127.0.0.1]/", "http://[::ffff:0:7f00:1]/",
		// Not a port.
		"https://example.com:99999/", "https://example.com:0/", "https://example.com:65536/",
	} {
		_, _, err := strict.RegisterEndpoint(e.ctx, scope.AgentID, scope, u, "")
		var me *models.Error
		if !models.IsCode(err, models.EInvalidRequest) || !errors.As(err, &me) || len(me.Fields) != 1 || me.Fields[0].Pointer != "/url" {
			t.Errorf("%s: %v, want invalid_request on /url", u, err)
		}
	}
	for _, u := range []string{"https://hooks.example.com/countersign", "http://93.184.215.14/hook",
		"https://hooks.1example.com/", "https://a1.example/"} {
		if _, _, err := strict.RegisterEndpoint(e.ctx, scope.AgentID, scope, u, ""); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	internal := e.strictEvents(events.Config{AllowAddresses: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}})
	if _, _, err := internal.RegisterEndpoint(e.ctx, scope.AgentID, scope, "http://10.1.2.3/hook", ""); err != nil {
		t.Errorf("an allowed range: %v", err)
	}
	// An IPv4 address with a trailing dot is refused as such (a delivery
	// would look it up as a name), not as a shorthand form.
	_, _, err := strict.RegisterEndpoint(e.ctx, scope.AgentID, scope, "http://1.1.1.1./", "")
	if !models.IsCode(err, models.EInvalidRequest) || !strings.Contains(err.Error(), "trailing dot") || strings.Contains(err.Error(), "other than") {
		t.Errorf("http://1.1.1.1./: %v", err)
	}
	if _, _, err := strict.RegisterEndpoint(e.ctx, scope.AgentID, scope, "https://example.com:65535/", ""); err != nil {
		t.Errorf("the highest port: %v", err)
	}
	// localhost is either loopback address: allowing one allows the name.
	for i, allow := range []string{"127.0.0.0/8", "::1/128"} {
		local := e.strictEvents(events.Config{AllowAddresses: []netip.Prefix{netip.MustParsePrefix(allow)}})
		// Another URL each time: the same one twice is refused.
		if _, _, err := local.RegisterEndpoint(e.ctx, scope.AgentID, scope, fmt.Sprintf("http://localhost:900%d/hook", i), ""); err != nil {
			t.Errorf("localhost with %s allowed: %v", allow, err)
		}
	}
}

// TestDeliveriesConnectOnlyWherePermitted: a delivery to an endpoint that
// connects to a refused address (one registered while it was allowed, as
// a name that resolves there at delivery time would) sends nothing: the
// attempt fails with the reason, and is retried like any failure, so that
// allowing the range lets it through.
func TestDeliveriesConnectOnlyWherePermitted(t *testing.T) {
	t.Parallel()
	clock := models.NewFixedClock(time.Now().UTC())
	e := newEnv(t, dbURL(t, "sqlite"), clock)
	r := newReceiver(t)
	ep, sec, err := e.events(events.Config{}).RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, r.URL+"/hook", "")
	if err != nil {
		t.Fatal(err)
	}
	r.secret = sec
	e.propose("ord_1001", 100)
	drain(t, e.strictEvents(events.Config{RetryBase: time.Second}))
	if got := r.messages(); len(got) != 0 {
		t.Fatalf("the receiver on loopback got %d messages", len(got))
	}
	log, err := e.strictEvents(events.Config{}).Deliveries(e.ctx, e.tenant, ep.ID, 10)
	if err != nil || len(log) == 0 {
		t.Fatalf("deliveries: %v %v", log, err)
	}
	for _, d := range log {
		if d.Status != models.DeliveryPending || d.Attempts != 1 || !strings.Contains(d.LastError, "a loopback address") {
			t.Errorf("delivery after a refused connection: %+v", d)
		}
	}
	clock.Advance(time.Minute)
	drain(t, e.events(events.Config{}))
	if got := r.messages(); len(got) != len(log) {
		t.Errorf("after allowing loopback the receiver got %d messages, want %d", len(got), len(log))
	}
}

// A description holding U+0000 is refused at /description on both
// databases (PostgreSQL cannot store it), and no endpoint is made.
func TestEndpointDescriptionWithNULIsRefused(t *testing.T) {
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		svc := e.events(events.Config{})
		scope := models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}
		_, _, err := svc.RegisterEndpoint(e.ctx, scope.AgentID, scope, "http://127.0.0.1:9/hook", "a\x00b")
		var me *models.Error
		if !errors.As(err, &me) || me.Code != models.EInvalidRequest || len(me.Fields) != 1 || me.Fields[0].Pointer != "/description" {
			t.Fatalf("%v, want invalid_request at /description", err)
		}
		if eps, err := e.store.WebhookEndpoints(e.ctx, scope); err != nil || len(eps) != 0 {
			t.Fatalf("endpoints after the refusal: %v %v", eps, err)
		}
	})
}
