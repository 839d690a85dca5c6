package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/jsonstrict"
	"github.com/countersign/countersign/models"
)

// decodeJSON reads the request body into dst strictly: the content type must
// be application/json (UTF-8) with no content encoding, the body at most
// h.maxBody bytes; what it holds is decoded by jsonstrict, the rules the
// MCP server's tool arguments follow too (one JSON object of valid UTF-8,
// no duplicate key at any depth, field names spelled exactly, no unknown
// or wrongly typed field). Every failure is EInvalidRequest with a message
// that tells the agent what to fix.
//
// The limit is enforced here and not only by middleware, so the handler is
// safe whatever server it is mounted in.
func (h *Handlers) decodeJSON(c echo.Context, dst any) error {
	req := c.Request()
	if err := checkContentType(req.Header.Get(echo.HeaderContentType)); err != nil {
		return err
	}
	if err := checkContentEncoding(req.Header.Values("Content-Encoding")); err != nil {
		return err
	}
	if req.ContentLength > h.maxBody {
		return h.tooLarge()
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, h.maxBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return h.tooLarge()
		}
		return models.Wrap(models.EInvalidRequest, err, "could not read the request body")
	}
	if int64(len(body)) > h.maxBody {
		return h.tooLarge()
	}
	return jsonstrict.Decode(body, dst, "request body")
}

// checkContentEncoding refuses a compressed body: the server does not
// inflate one, and read as JSON its bytes would only be reported as
// invalid UTF-8, which does not say what to change. The status stays 400
// (invalid_request), since every code answers with one status.
func checkContentEncoding(values []string) error {
	for _, v := range values {
		for _, enc := range strings.Split(v, ",") {
			if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
				return models.Errorf(models.EInvalidRequest,
					"Content-Encoding %q is not supported: send the JSON body uncompressed, without a Content-Encoding header", enc)
			}
		}
	}
	return nil
}

func (h *Handlers) tooLarge() error {
	return models.Errorf(models.EInvalidRequest, "request body exceeds the limit of %d bytes", h.maxBody)
}

// checkContentType accepts application/json with no charset or charset=utf-8.
func checkContentType(v string) error {
	if v == "" {
		return models.Errorf(models.EInvalidRequest, "missing Content-Type; send \"Content-Type: application/json\"")
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || mt != echo.MIMEApplicationJSON {
		return models.Errorf(models.EInvalidRequest, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return models.Errorf(models.EInvalidRequest, "Content-Type charset must be utf-8")
	}
	return nil
}
