package stepup

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckRelyingParty applies the rules browsers hold a relying party to:
// rpID is a domain name (no scheme, port, path or IP address: browsers
// accept none of them), and every origin is scheme://host[:port], http or
// https, whose host is rpID or a subdomain of it. New applies it, and
// config check can apply it before anything starts. The errors name the
// value at fault.
func CheckRelyingParty(rpID string, origins []string) error {
	if rpID == "" || len(origins) == 0 {
		return fmt.Errorf("a relying party id and at least one origin are required")
	}
	if net.ParseIP(strings.Trim(rpID, "[]")) != nil {
		return fmt.Errorf("relying party id %q is an IP address, which browsers refuse: use a host name (localhost for a local server)", rpID)
	}
	if strings.ContainsAny(rpID, ":/?#@ ") || strings.HasPrefix(rpID, ".") || strings.HasSuffix(rpID, ".") || strings.Contains(rpID, "..") {
		return fmt.Errorf("relying party id %q is not a host name (give the console's host name or a parent domain, without scheme or port)", rpID)
	}
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return fmt.Errorf("origin %q is not scheme://host[:port]", o)
		}
		if !originMatchesRPID(o, rpID) {
			return fmt.Errorf("origin %q is not within the relying party id %q (browsers refuse that)", o, rpID)
		}
	}
	return nil
}
