package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
)

// readyTimeout bounds a health check: a database that does not answer
// quickly is not ready.
const readyTimeout = 2 * time.Second

// JWKS handles GET /.well-known/jwks.json: the public keys that verify
// confirmation tokens, for downstream systems. Public and briefly cacheable,
// so a rotated key is picked up within minutes.
func (h *Handlers) JWKS(c echo.Context) error {
	b, err := h.p.JWKS(c.Request().Context())
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
	return c.Blob(http.StatusOK, "application/jwk-set+json", b)
}

// Healthz handles GET /healthz: 200 {"status":"ok"} when the database
// answers, 503 unavailable otherwise.
func (h *Handlers) Healthz(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	if err := h.p.Ready(ctx); err != nil {
		return models.Wrap(models.EUnavailable, err, "not ready: the database does not answer")
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}
