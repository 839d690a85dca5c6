package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// GetProposal handles GET /api/v1/proposals/{id}.
//
// The response carries a weak ETag of the proposal's revision; a request whose
// If-None-Match names it gets 304. With ?wait=N (0..60 seconds) a request
// that already has the current revision — through If-None-Match or
// ?since=<revision> — is held until the proposal changes: 200 with the new
// body as soon as it does, 304 when the wait elapses without a change. Over
// HTTP/1.x a held request is parked: its connection is taken over and
// answered later, with Connection: close, holding no goroutine (see park).
func (h *Handlers) GetProposal(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	wait, err := waitParam(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	since, hasSince, err := sinceParam(c.QueryParam("since"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := c.Param("id")
	p, err := h.p.AgentGet(ctx, agent, id)
	if err != nil {
		return err
	}
	inm := c.Request().Header.Get("If-None-Match")
	unchanged := func(p *models.Proposal) bool {
		if hasSince {
			return p.Revision == since
		}
		return inm != "" && etagMatches(inm, etag(p))
	}
	if unchanged(p) && wait > 0 {
		// When since names an older revision the proposal has already
		// changed and unchanged is false: no wait.
		var parked bool
		p, parked, err = h.wait(c, agent, p, wait, unchanged)
		if parked {
			return nil // answered later, on the connection taken over
		}
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // the agent went away; nobody to answer
			}
			return err
		}
	}
	_, pretty := c.QueryParams()["pretty"]
	status, body, err := h.proposalAnswer(c.Response().Header(), p, agent, unchanged(p), pretty)
	if err != nil {
		return err
	}
	if status == http.StatusNotModified {
		return c.NoContent(status)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}

// proposalAnswer is GET's answer for p, in both the blocking and the parked
// long-poll: 304 when the caller has p's revision (unchanged), else 200
// with p as the agent sees it. It sets the ETag and Cache-Control on hdr,
// and Content-Type when there is a body.
func (h *Handlers) proposalAnswer(hdr http.Header, p *models.Proposal, agent models.Agent, unchanged, pretty bool) (int, []byte, error) {
	if unchanged {
		return notModified(hdr, etag(p)), nil, nil
	}
	hdr.Set("ETag", etag(p))
	hdr.Set(echo.HeaderCacheControl, "no-store")
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if pretty {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(newProposalJSON(p, agent, h.clock.Now())); err != nil {
		return 0, nil, err
	}
	hdr.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	return http.StatusOK, b.Bytes(), nil
}

// notModified is the answer to a caller that has the revision whose ETag
// is tag: 304 with that ETag.
func notModified(hdr http.Header, tag string) int {
	hdr.Set("ETag", tag)
	hdr.Set(echo.HeaderCacheControl, "no-store")
	return http.StatusNotModified
}

// waitParam parses ?wait=N: whole seconds 0..60, capped at writes.MaxWait.
func waitParam(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	max := int(writes.MaxWait / time.Second)
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > max {
		return 0, models.Errorf(models.EInvalidRequest, "wait must be a whole number of seconds from 0 to %d", max)
	}
	return min(time.Duration(n)*time.Second, writes.MaxWait), nil
}

// sinceParam parses ?since=<revision>.
func sinceParam(v string) (int64, bool, error) {
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, models.Errorf(models.EInvalidRequest, "since must be a revision number (a non-negative integer)")
	}
	return n, true, nil
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110 13.1.2):
// any listed tag, or "*", that equals the current one ignoring W/.
func etagMatches(header, current string) bool {
	current = strings.TrimPrefix(current, "W/")
	for tag := range strings.SplitSeq(header, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == current {
			return true
		}
	}
	return false
}
