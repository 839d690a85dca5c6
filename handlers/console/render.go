package console

import (
	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/layout"
)

// render writes a complete HTML response: every console page and fragment
// goes through here, so they all carry the same Content-Type.
func render(c echo.Context, status int, page templ.Component) error {
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(status)
	return page.Render(c.Request().Context(), c.Response())
}

// AssetsFor returns the content-hashed URLs the page frame links to.
func AssetsFor(a *static.Assets) layout.Assets {
	return layout.Assets{
		CSS:  a.URL("css/app.css"),
		HTMX: a.URL("vendor/htmx/htmx.min.js"),
		SSE:  a.URL("vendor/htmx-ext-sse/sse.min.js"),
		JS:   a.URL("js/app.js"),
		// WebAuthn ceremonies: security keys and step-up approvals.
		WebAuthn: a.URL("js/webauthn.js"),
	}
}
