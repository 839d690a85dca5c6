package api

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/web/detach"
)

// Parker is implemented by a Protocol that can hold a long-poll without a
// goroutine (*writes.Service): AgentPark is AgentWait that returns the
// long-poll unstarted (or, when p changed already, the newer revision).
type Parker interface {
	AgentPark(ctx context.Context, agent models.Agent, p *models.Proposal, max time.Duration) (*writes.Parked, *models.Proposal, error)
}

// parkedWriteTimeout bounds writing a parked long-poll's answer, which runs
// on one of the few workers that answer every parked long-poll: a client
// that does not read cannot hold one for long. An answer is a few KiB, which
// the socket's buffer takes at once from any client that is still there.
const parkedWriteTimeout = 5 * time.Second

// wait holds the long-poll of GetProposal on p: it returns the proposal to
// answer with, or parked when the request was detached and is answered
// later (see park).
func (h *Handlers) wait(c echo.Context, agent models.Agent, p *models.Proposal, max time.Duration,
	unchanged func(*models.Proposal) bool) (_ *models.Proposal, parked bool, _ error) {
	ctx := c.Request().Context()
	parker, ok := h.p.(Parker)
	if !ok {
		p, err := h.p.AgentWait(ctx, agent, p, max)
		return p, false, err
	}
	pk, q, err := parker.AgentPark(ctx, agent, p, max)
	if err != nil || pk == nil {
		return q, false, err
	}
	if h.park(c, pk, agent, p, unchanged) {
		return nil, true, nil
	}
	// Not on a connection that can be taken over (HTTP/2, a recorder):
	// the same long-poll, holding this goroutine.
	q, err = pk.Wait(ctx)
	if q == nil && err == nil {
		return p, false, nil
	}
	return q, false, err
}

// park answers the long-poll pk on p later, without holding a goroutine or
// net/http's buffers meanwhile: it takes the connection over from net/http
// (which then lets go of its read and write buffers and its goroutines),
// keeps the headers the middleware set so far, and starts pk; when pk is
// over, a worker writes the answer GetProposal gives without parking, with
// Connection: close, and closes the connection. It reports false, having
// done nothing, when the connection cannot be taken over: HTTP/2, a HEAD
// request or one with a body, a server that does not support detached
// requests (no detach.Request with an ErrorResponse in the context) or a
// ResponseWriter that is no http.Hijacker.
//
// While parked, a long-poll keeps only what its answer needs: not the
// request, not the proposal (a 304 needs its ETag; a change brings a newer
// revision), not the agent (only what token visibility looks at).
//
// A client that goes away while its long-poll is parked ends it, as it
// would end a long-poll that holds its goroutine (net/http ends the
// request's context): the connection is watched for the client's hang-up
// (detach.WatchHangup, no goroutine of its own), which stops the
// long-poll, so that the agent's long-poll slot and the connection are
// given back then, not at the deadline. Where connections cannot be
// watched, that happens when the answer is written (and fails), at most
// MaxWait (60 s) later.
func (h *Handlers) park(c echo.Context, pk *writes.Parked, agent models.Agent, p *models.Proposal,
	unchanged func(*models.Proposal) bool) bool {
	req := c.Request()
	dr := detach.FromContext(req.Context())
	// A request with a body is not parked either: the body would be left
	// unread, and closing a connection with unread data resets it, which
	// may lose the answer on its way.
	if dr == nil || dr.ErrorResponse == nil || req.Method != http.MethodGet || req.ProtoMajor != 1 || req.ContentLength != 0 {
		return false
	}
	hdr := headerLines(c.Response().Header())
	conn, _, err := http.NewResponseController(c.Response()).Hijack()
	if err != nil {
		return false
	}
	// The bufio.ReadWriter Hijack returns is dropped: nothing more is read
	// from the connection (it is closed after the answer), and the answer
	// is written in one piece.
	ctx := detach.Values(req.Context())
	_, pretty := c.QueryParams()["pretty"]
	proto := "HTTP/1.0"
	if req.ProtoAtLeast(1, 1) {
		proto = "HTTP/1.1"
	}
	// All the answer looks at of the agent (models.Agent.MaySeeToken).
	reader := models.Agent{ID: agent.ID, TenantID: agent.TenantID}
	tag := etag(p)
	dr.Detach(ctx, pk.Stop)
	var left atomic.Bool
	unwatch := detach.WatchHangup(conn, func() { left.Store(true); pk.Stop() })
	pk.Start(ctx, func(q *models.Proposal, err error) {
		unwatch() // before the connection is closed
		if left.Load() {
			// Nobody reads an answer any more.
			conn.Close()
			dr.Finish(0, 0)
			return
		}
		answer := hdr.header()
		var (
			status int
			body   []byte
		)
		switch {
		case err != nil:
		case q == nil: // no newer revision
			status = notModified(answer, tag)
		default:
			status, body, err = h.proposalAnswer(answer, q, reader, unchanged(q), pretty)
		}
		if err != nil {
			status, body = dr.ErrorResponse(ctx, err, answer)
		}
		n, werr := writeParked(conn, proto, status, answer, body)
		if werr != nil {
			status = 0 // the client is gone; nothing was answered
		}
		dr.Finish(status, n)
	})
	return true
}

// headers are a response's header lines, kept in one slice while a
// long-poll is parked: key, value, key, value...
type headers []string

func headerLines(h http.Header) headers {
	n := 0
	for _, vs := range h {
		n += 2 * len(vs)
	}
	out := make(headers, 0, n)
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k, v)
		}
	}
	return out
}

func (hs headers) header() http.Header {
	h := make(http.Header, len(hs)/2+6)
	for i := 0; i < len(hs); i += 2 {
		h[hs[i]] = append(h[hs[i]], hs[i+1])
	}
	return h
}

// writeParked writes an answer on a connection taken over from net/http,
// framed as net/http frames it (Date, and Content-Length where a body is
// allowed), with Connection: close, and closes the connection. It returns
// the size of the body sent.
func writeParked(conn net.Conn, proto string, status int, hdr http.Header, body []byte) (int64, error) {
	defer conn.Close()
	hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if status != http.StatusNotModified && status != http.StatusNoContent {
		hdr.Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
	} else {
		body = nil
	}
	hdr.Set(echo.HeaderConnection, "close")
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %03d %s\r\n", proto, status, http.StatusText(status))
	if err := hdr.Write(&b); err != nil {
		return 0, err
	}
	b.WriteString("\r\n")
	b.Write(body)
	if err := conn.SetWriteDeadline(time.Now().Add(parkedWriteTimeout)); err != nil {
		return 0, err
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	// Half-close first, so that the client reads the whole answer before
	// the end of the connection; nothing is left unread on our side (the
	// request was read in full), so the close sends no reset.
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return int64(len(body)), nil
}
