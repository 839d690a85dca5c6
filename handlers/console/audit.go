package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/audit"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/web/session"
)

// AuditProtocol is what the audit pages need (*writes.Service).
type AuditProtocol interface {
	// Receipt returns a settled execution's signed receipt.
	Receipt(ctx context.Context, tenantID, executionID string) (string, models.SignedReceipt, error)
	// AuditEntries returns the tenant's chain after a position, and the
	// newest checkpoint.
	AuditEntries(ctx context.Context, tenantID string, after int64, limit int) ([]models.AuditEntry, models.Checkpoint, bool, error)
	// ProposalAudit returns the entries about one proposal.
	ProposalAudit(ctx context.Context, tenantID, proposalID string) ([]models.AuditEntry, error)
}

// AuditPages serves the audit log pages and receipt downloads.
type AuditPages struct {
	p      AuditProtocol
	assets layout.Assets
}

// NewAuditPages returns the audit pages over p.
func NewAuditPages(p AuditProtocol, assets *static.Assets) *AuditPages {
	return &AuditPages{p: p, assets: AssetsFor(assets)}
}

// auditPageSize is how many entries the tenant's log shows at once.
const auditPageSize = 100

func (h *AuditPages) frame(s *session.Session, title, active string) layout.Page {
	return layout.Page{Title: title, User: frameUser(s), CSRF: s.CSRF, Active: active, Assets: h.assets}
}

// DownloadReceipt serves GET /executions/:id/receipt.jws: the signed
// receipt of a settled execution of the reviewer's tenant, as a file.
func (h *AuditPages) DownloadReceipt(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	compact, _, err := h.p.Receipt(c.Request().Context(), s.User.TenantID, id)
	if err != nil {
		return err
	}
	noStore(c)
	c.Response().Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="receipt-%s.jws"`, safeFileName(id)))
	return c.Blob(http.StatusOK, "application/jose", []byte(compact+"\n"))
}

// safeFileName keeps the characters of an id that are safe in a header.
func safeFileName(id string) string {
	out := make([]byte, 0, len(id))
	for i := 0; i < len(id) && len(out) < 100; i++ {
		if b := id[i]; urlSafeByte(b) {
			out = append(out, b)
		}
	}
	return string(out)
}

func urlSafeByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_'
}

// ProposalAudit serves GET /proposals/:id/audit: every recorded event of
// one proposal of the reviewer's tenant. 404 for unknown or foreign ids.
func (h *AuditPages) ProposalAudit(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	ctx := c.Request().Context()
	entries, err := h.p.ProposalAudit(ctx, s.User.TenantID, id)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return models.Errorf(models.ENotFound, "no proposal %q", id)
	}
	_, cp, ok, err := h.p.AuditEntries(ctx, s.User.TenantID, 0, 0)
	if err != nil {
		return err
	}
	page := audit.Page{Layout: h.frame(s, "Audit trail", "history"), Heading: "Audit trail of " + id,
		Lead:   "Every event of this proposal, as recorded in the organization's hash-chained audit log in the same transaction as the change itself.",
		Export: "countersign audit export --tenant " + s.Tenant.Name + " --out audit.jsonl && countersign verify --export audit.jsonl"}
	page.ChainOK, page.ChainMsg = hashesHold(entries, false)
	page.Entries = entryViews(entries, s.User.Location())
	if ok {
		page.Checkpoint = checkpointView(cp, s.User.Location())
	}
	noStore(c)
	return render(c, http.StatusOK, audit.View(page))
}

// TenantAudit serves GET /audit?after=SEQ for administrators: the
// organization's whole chain, oldest first, a page at a time.
func (h *AuditPages) TenantAudit(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	var after int64
	if v := c.QueryParam("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return models.Errorf(models.EInvalidRequest, "after must be a non-negative integer")
		}
	}
	entries, cp, ok, err := h.p.AuditEntries(c.Request().Context(), s.User.TenantID, after, auditPageSize)
	if err != nil {
		return err
	}
	page := audit.Page{Layout: h.frame(s, "Audit log", "audit"), Heading: "Audit log",
		Lead: "Every proposal, decision, token, execution, sign-in and administrative change of " + s.Tenant.Name +
			", each entry holding the SHA-256 of the one before it. Nothing here can be changed or removed.",
		Export: "countersign audit export --tenant " + s.Tenant.Name + " --out audit.jsonl && countersign verify --export audit.jsonl"}
	page.ChainOK, page.ChainMsg = hashesHold(entries, true)
	page.Entries = entryViews(entries, s.User.Location())
	if ok {
		page.Checkpoint = checkpointView(cp, s.User.Location())
	}
	if len(entries) == auditPageSize {
		page.NewerURL = fmt.Sprintf("/audit?after=%d", entries[len(entries)-1].Seq)
	}
	if after > 0 {
		page.FirstURL = "/audit"
	}
	noStore(c)
	return render(c, http.StatusOK, audit.View(page))
}

// hashesHold re-checks the shown entries: each hash covers its body and,
// for consecutive entries, each links to the one before.
func hashesHold(entries []models.AuditEntry, consecutive bool) (bool, string) {
	for i, e := range entries {
		if models.AuditHash([]byte(e.Body)) != e.Hash {
			return false, fmt.Sprintf("entry %d does not match its hash", e.Seq)
		}
		if consecutive && i > 0 && (e.Seq != entries[i-1].Seq+1 || e.Prev != entries[i-1].Hash) {
			return false, fmt.Sprintf("entry %d does not link to entry %d", e.Seq, entries[i-1].Seq)
		}
	}
	if len(entries) == 0 {
		return true, "empty"
	}
	if consecutive {
		return true, fmt.Sprintf("entries %d to %d match their hashes and link in order", entries[0].Seq, entries[len(entries)-1].Seq)
	}
	return true, fmt.Sprintf("%d entries match their hashes", len(entries))
}

// entryViews shows entries with their times in loc, the reviewer's zone,
// to the millisecond: entries of one change are often that close.
func entryViews(entries []models.AuditEntry, loc *time.Location) []audit.Entry {
	out := make([]audit.Entry, 0, len(entries))
	for _, e := range entries {
		b, _ := e.Decode()
		var data bytes.Buffer
		if err := json.Indent(&data, b.Data, "", "  "); err != nil {
			data.Reset()
			data.Write(b.Data)
		}
		v := audit.Entry{Seq: strconv.FormatInt(e.Seq, 10), Kind: e.Kind, Actor: b.Actor,
			At: e.CreatedAt.In(loc).Format("2006-01-02 15:04:05.000 MST"), AtISO: e.CreatedAt.UTC().Format(time.RFC3339Nano),
			Hash: e.Hash, Prev: e.Prev,
			ProposalID: e.ProposalID, Data: data.String()}
		if v.Prev == "" {
			v.Prev = "(first entry)"
		}
		if e.ProposalID != "" {
			v.ProposalURL = proposalURL(e.ProposalID)
		}
		out = append(out, v)
	}
	return out
}

func checkpointView(cp models.Checkpoint, loc *time.Location) *audit.Checkpoint {
	return &audit.Checkpoint{Seq: strconv.FormatInt(cp.Seq, 10), Hash: cp.Hash, At: formatIn(cp.CreatedAt, loc),
		AtISO: cp.CreatedAt.UTC().Format(time.RFC3339)}
}
