package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// TestHeadEndsAStreamAtItsHeaders: a handler that streams after writing its
// headers sees its context end at once on HEAD, and not on GET.
func TestHeadEndsAStreamAtItsHeaders(t *testing.T) {
	e := echo.New()
	ended := make(chan bool, 1)
	e.Match(getHead, "/stream", func(c echo.Context) error {
		c.Response().WriteHeader(http.StatusOK)
		select {
		case <-c.Request().Context().Done():
			ended <- true
		case <-time.After(300 * time.Millisecond):
			ended <- false
		}
		return nil
	}, headStopsAtHeaders)
	for method, want := range map[string]bool{http.MethodHead: true, http.MethodGet: false} {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, "/stream", nil))
		if got := <-ended; got != want {
			t.Errorf("%s: context ended after the headers = %v, want %v", method, got, want)
		}
	}
}
