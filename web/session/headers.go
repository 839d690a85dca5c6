package session

import "github.com/labstack/echo/v4"

// ContentSecurityPolicy allows only this site's own scripts, styles,
// images (and data: images), connections and form targets; no inline
// script or style, no plugins, no <base>, and no framing at all, so an
// approve button can never be clickjacked.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// PermissionsPolicy turns off powerful features the console never uses.
const PermissionsPolicy = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

// SecurityHeaders sets the console's security headers on every response
// before the handler runs, so error pages and 404s carry them too: the CSP,
// X-Frame-Options DENY, Referrer-Policy same-origin, nosniff, COOP, a
// minimal Permissions-Policy and Cache-Control no-store (pages show CSRF
// tokens, keys and evidence; handlers of cacheable responses, such as the
// hashed static assets, replace it). With secure, it adds HSTS.
func SecurityHeaders(secure bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Content-Security-Policy", ContentSecurityPolicy)
			h.Set(echo.HeaderXFrameOptions, "DENY")
			h.Set(echo.HeaderReferrerPolicy, "same-origin")
			h.Set(echo.HeaderXContentTypeOptions, "nosniff")
			h.Set("Cross-Origin-Opener-Policy", "same-origin")
			h.Set("Permissions-Policy", PermissionsPolicy)
			h.Set(echo.HeaderCacheControl, "no-store")
			if secure {
				h.Set(echo.HeaderStrictTransportSecurity, "max-age=31536000")
			}
			return next(c)
		}
	}
}
