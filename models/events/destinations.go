package events

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/countersign/countersign/models"
)

// Whoever holds an agent key (or administers a tenant) chooses where the
// server sends webhooks. Left alone, that would let them make the server
// POST to addresses only it can reach: the cloud's metadata service, the
// database, an administration port on loopback. Webhooks therefore go only
// to public unicast addresses, and to the ranges the operator allows
// (Config.AllowAddresses), for instance an internal receiver or an egress
// proxy on a private address. The check is made on the address each
// connection is about to be opened to, after name resolution, so that a
// name that resolves elsewhere at delivery time than it did at
// registration (DNS rebinding) is caught too; a URL naming a refused
// address outright is refused at registration already.

// nonPublic are the special-purpose ranges (IANA's IPv4 and IPv6
// special-purpose address registries) that net/netip does not classify
// itself, and the IPv6 ranges that embed an IPv4 address, which could
// reach a private IPv4 host through a translator.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (carrier-grade NAT)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the limited broadcast address
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated): ::a.b.c.d
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT): ::ffff:0:a.b.c.d
	netip.MustParsePrefix("64:ff9b::/96"),    // IPv4/IPv6 translation
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local IPv4/IPv6 translation
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo among them)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4
	netip.MustParsePrefix("3fff::/20"),       // documentation
	netip.MustParsePrefix("5f00::/16"),       // segment routing (SRv6) SIDs
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// Destinations decides which addresses webhooks may be sent to: public
// unicast ones, and those in Allow.
type Destinations struct {
	Allow []netip.Prefix
}

// Check returns nil when a webhook may be sent to addr, and otherwise an
// error that says what the address is and how to allow it.
func (d Destinations) Check(addr netip.Addr) error {
	addr = addr.Unmap()
	for _, p := range d.Allow {
		if p.Contains(addr) {
			return nil
		}
	}
	kind := ""
	switch {
	case !addr.IsValid():
		kind = "no address"
	case addr.IsLoopback():
		kind = "a loopback address"
	case addr.IsPrivate():
		kind = "a private address"
	case addr.IsLinkLocalUnicast():
		kind = "a link-local address (cloud metadata services live there)"
	case addr.IsUnspecified():
		kind = "the unspecified address"
	case addr.IsMulticast():
		kind = "a multicast address"
	default:
		for _, p := range nonPublic {
			if p.Contains(addr) {
				kind = "a special-purpose address (" + p.String() + ")"
				break
			}
		}
	}
	if kind == "" {
		return nil
	}
	return &RefusedAddressError{Addr: addr, Kind: kind}
}

// RefusedAddressError is a destination outside public unicast that the
// operator has not allowed, or a host written as an address in a form
// that is refused whatever it means (Literal).
type RefusedAddressError struct {
	Addr netip.Addr
	Kind string
	// Literal is the host as written when it is refused for its form.
	Literal string
}

func (e *RefusedAddressError) Error() string {
	if e.Literal != "" {
		return fmt.Sprintf("webhooks are not sent to %q, %s; write the address as a.b.c.d or use a name", e.Literal, e.Kind)
	}
	return fmt.Sprintf("webhooks are not sent to %s, %s; the operator can allow its range (countersign serve --webhook-allow)", e.Addr, e.Kind)
}

// numericHost reports whether a host (lower case, no trailing dot) ends in
// a number, which the WHATWG URL standard reads as an IPv4 address in one
// of its shorthand forms (decimal, octal or hexadecimal parts, fewer than
// four of them); no domain name's last label is a number.
func numericHost(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	digits := "0123456789"
	if strings.HasPrefix(last, "0x") {
		last, digits = last[2:], "0123456789abcdef"
		if last == "" {
			return true
		}
	}
	return strings.Trim(last, digits) == ""
}

// CheckHost refuses, at registration, a URL host that is itself a refused
// address or a name that always means this machine ("localhost" and
// names under it). Other names are checked when a delivery connects.
func (d Destinations) CheckHost(host string) error {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		// It resolves to either loopback address: allowing one of them
		// allows the name.
		v4 := d.Check(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
		if v4 == nil || d.Check(netip.IPv6Loopback()) == nil {
			return nil
		}
		return v4
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		if a, err := netip.ParseAddr(h); err == nil && a.Is4() && h != strings.ToLower(host) {
			// Connecting would look "1.1.1.1." up as a name.
			return &RefusedAddressError{Kind: "an IPv4 address with a trailing dot", Literal: host}
		}
		if numericHost(h) {
			// 2130706433, 0x7f000001, 127.1, 0177.0.0.1: what URL parsers,
			// proxies and C resolvers read as an IPv4 address, and what
			// the Go resolver would send to DNS as a name.
			return &RefusedAddressError{Kind: "an IPv4 address written other than as four decimal numbers", Literal: host}
		}
		return nil // a name
	}
	if addr.Zone() != "" {
		return &RefusedAddressError{Addr: addr, Kind: "an address with a zone (link-local)"}
	}
	return d.Check(addr)
}

// Client returns an HTTP client for webhooks that connects only to
// addresses d permits, follows no redirect (a redirect could lead
// anywhere) and takes a proxy from the environment (HTTPS_PROXY,
// HTTP_PROXY, NO_PROXY) as net/http does. Through a proxy, the
// connection checked is the proxy's: the proxy then decides where
// webhooks may go, and a proxy on a private address must be allowed.
func (d Destinations) Client() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhook connection to %q: %w", address, err)
			}
			return d.Check(ap.Addr())
		}}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DialContext: dialer.DialContext,
		ForceAttemptHTTP2: true, MaxIdleConns: 100, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second, ExpectContinueTimeout: time.Second}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// checkEndpointURL is CheckURL and, for its host, CheckHost, with the
// refusal as EInvalidRequest on /url.
func (d Destinations) checkEndpointURL(raw string) (string, error) {
	u, err := CheckURL(raw)
	if err != nil {
		return "", err
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return "", models.Wrap(models.EInvalidRequest, err, "the endpoint URL does not parse")
	}
	if err := d.CheckHost(parsed.Hostname()); err != nil {
		return "", &models.Error{Code: models.EInvalidRequest, Message: err.Error(),
			Fields: []models.FieldProblem{{Pointer: "/url", Message: "a refused destination"}}}
	}
	return u, nil
}
