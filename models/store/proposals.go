package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type proposalRow struct {
	ID                string `gorm:"primaryKey"`
	TenantID          string
	AgentID           string
	Tool              string
	Arguments         string
	ArgsDigest        string
	Preview           string
	Resource          string
	ResourceSet       string
	ResourceSetDigest string
	ResourceCount     int
	ResourceLabel     string
	StateVersion      string
	RiskTier          string
	Confirmation      string
	Quorum            int
	TTLMs             int64 `gorm:"column:ttl_ms"`
	AllowSelfApproval bool
	PolicyVersion     string
	RequestKey        string
	Context           string
	Problems          string
	Kind              string
	MandateID         string
	MandateNote       string
	Effect            string
	EffectDigest      string
	Status            string
	Revision          int64
	CreatedAt         int64 `gorm:"autoCreateTime:false"`
	ExpiresAt         int64
	UpdatedAt         int64 `gorm:"autoUpdateTime:false"`
}

func (proposalRow) TableName() string { return "proposals" }

// proposalCols lists a proposal's columns, each prefixed with "p.", in the
// order fields returns them.
const proposalCols = `p.id, p.tenant_id, p.agent_id, p.tool, p.arguments, p.args_digest, p.preview, p.resource, p.resource_set,
 p.resource_set_digest, p.resource_count, p.resource_label, p.state_version, p.risk_tier, p.confirmation, p.quorum, p.ttl_ms,
 p.allow_self_approval, p.policy_version, p.request_key, p.context, p.problems, p.kind, p.mandate_id, p.mandate_note,
 p.effect, p.effect_digest, p.status, p.revision, p.created_at, p.expires_at, p.updated_at`

// insertProposalSQL inserts a proposal row unless it conflicts on a unique
// key (an agent's request key), and answers for an inserted row whether
// its tenant has a live mandate for its tool ($33: the live status), so
// that the mandates are read only when one might confirm it.
var insertProposalSQL = "INSERT INTO proposals (" + strings.ReplaceAll(proposalCols, "p.", "") + ") VALUES (" +
	placeholders(1, len((&proposalRow{}).values())) + ") ON CONFLICT (tenant_id, agent_id, request_key) DO NOTHING" +
	" RETURNING EXISTS (SELECT 1 FROM mandates m WHERE m.tenant_id = $2 AND m.tool = $4 AND m.status = $33)"

// values returns the fields of proposalCols, in its order.
func (r *proposalRow) values() []any {
	return []any{r.ID, r.TenantID, r.AgentID, r.Tool, r.Arguments, r.ArgsDigest, r.Preview, r.Resource, r.ResourceSet,
		r.ResourceSetDigest, r.ResourceCount, r.ResourceLabel, r.StateVersion, r.RiskTier, r.Confirmation, r.Quorum, r.TTLMs,
		r.AllowSelfApproval, r.PolicyVersion, r.RequestKey, r.Context, r.Problems, r.Kind, r.MandateID, r.MandateNote,
		r.Effect, r.EffectDigest, r.Status, r.Revision, r.CreatedAt, r.ExpiresAt, r.UpdatedAt}
}

// fields returns pointers to the fields of proposalCols, in its order.
func (r *proposalRow) fields() []any {
	return []any{&r.ID, &r.TenantID, &r.AgentID, &r.Tool, &r.Arguments, &r.ArgsDigest, &r.Preview, &r.Resource, &r.ResourceSet,
		&r.ResourceSetDigest, &r.ResourceCount, &r.ResourceLabel, &r.StateVersion, &r.RiskTier, &r.Confirmation, &r.Quorum, &r.TTLMs,
		&r.AllowSelfApproval, &r.PolicyVersion, &r.RequestKey, &r.Context, &r.Problems, &r.Kind, &r.MandateID, &r.MandateNote,
		&r.Effect, &r.EffectDigest, &r.Status, &r.Revision, &r.CreatedAt, &r.ExpiresAt, &r.UpdatedAt}
}

func proposalToRow(p *models.Proposal) (proposalRow, error) {
	preview, err := json.Marshal(p.Preview)
	if err != nil {
		return proposalRow{}, err
	}
	row := proposalRow{
		ID: p.ID, TenantID: p.TenantID, AgentID: p.AgentID, Tool: p.Tool,
		Arguments: string(p.Arguments), ArgsDigest: p.ArgsDigest, Preview: string(preview),
		Resource: p.Resource, ResourceSetDigest: p.ResourceSetDigest, ResourceCount: p.ResourceCount,
		ResourceLabel: p.ResourceLabel, StateVersion: p.StateVersion,
		RiskTier: p.Tier.Name, Confirmation: string(p.Tier.Confirmation), Quorum: p.Tier.Quorum,
		TTLMs: p.Tier.TTL.Milliseconds(), AllowSelfApproval: p.Tier.AllowSelfApproval,
		PolicyVersion: p.PolicyVersion, RequestKey: p.RequestKey, Context: p.Context,
		Status: string(p.Status), Revision: p.Revision,
		CreatedAt: ms(p.CreatedAt), ExpiresAt: ms(p.ExpiresAt), UpdatedAt: ms(p.UpdatedAt),
		Kind: p.Kind, MandateID: p.MandateID, MandateNote: p.MandateNote, EffectDigest: p.EffectDigest,
	}
	if p.ResourceSet != nil {
		b, err := json.Marshal(p.ResourceSet)
		if err != nil {
			return proposalRow{}, err
		}
		row.ResourceSet = string(b)
	}
	if len(p.Problems) > 0 {
		b, err := json.Marshal(p.Problems)
		if err != nil {
			return proposalRow{}, err
		}
		row.Problems = string(b)
	}
	if p.Effect != nil {
		b, err := json.Marshal(p.Effect)
		if err != nil {
			return proposalRow{}, err
		}
		row.Effect = string(b)
	}
	return row, nil
}

func (r proposalRow) model(agentName string) (*models.Proposal, error) {
	p := &models.Proposal{
		ID: r.ID, TenantID: r.TenantID, AgentID: r.AgentID, AgentName: agentName, Tool: r.Tool,
		Arguments: json.RawMessage(r.Arguments), ArgsDigest: r.ArgsDigest,
		Resource: r.Resource, ResourceSetDigest: r.ResourceSetDigest, ResourceCount: r.ResourceCount,
		ResourceLabel: r.ResourceLabel, StateVersion: r.StateVersion,
		Tier: models.Tier{Name: r.RiskTier, Confirmation: models.Confirmation(r.Confirmation), Quorum: r.Quorum,
			TTL: time.Duration(r.TTLMs) * time.Millisecond, AllowSelfApproval: r.AllowSelfApproval},
		PolicyVersion: r.PolicyVersion, RequestKey: r.RequestKey, Context: r.Context,
		Status: models.Status(r.Status), Revision: r.Revision,
		CreatedAt: fromMS(r.CreatedAt), ExpiresAt: fromMS(r.ExpiresAt), UpdatedAt: fromMS(r.UpdatedAt),
		Kind: r.Kind, MandateID: r.MandateID, MandateNote: r.MandateNote, EffectDigest: r.EffectDigest,
	}
	if r.Effect != "" {
		p.Effect = &models.Description{}
		if err := json.Unmarshal([]byte(r.Effect), p.Effect); err != nil {
			return nil, fmt.Errorf("proposal %s effect: %w", r.ID, err)
		}
	}
	if err := json.Unmarshal([]byte(r.Preview), &p.Preview); err != nil {
		return nil, fmt.Errorf("proposal %s preview: %w", r.ID, err)
	}
	if r.ResourceSet != "" {
		if err := json.Unmarshal([]byte(r.ResourceSet), &p.ResourceSet); err != nil {
			return nil, fmt.Errorf("proposal %s resource set: %w", r.ID, err)
		}
	}
	if r.Problems != "" {
		if err := json.Unmarshal([]byte(r.Problems), &p.Problems); err != nil {
			return nil, fmt.Errorf("proposal %s problems: %w", r.ID, err)
		}
	}
	return p, nil
}

// CreateProposal stores a new proposal snapshot. When the proposing agent
// already has a proposal with the same request key, nothing is written and the existing
// proposal is returned with inserted=false; the caller decides whether that
// is an idempotent retry or idempotency_key_reuse.
//
// When the connection fails during the commit, it reads back under the
// request key what is stored, and answers from that; only when that read
// fails too, or finds nothing (the commit may still be in flight on the
// server), it returns EOutcomeUncertain: retrying with the same request key
// is then safe.
func (s *Store) CreateProposal(ctx context.Context, p *models.Proposal) (existing *models.Proposal, inserted bool, err error) {
	return s.CreateProposalWithin(ctx, p, 0)
}

// CreateProposalWithin is CreateProposal that also refuses, with
// ERateLimited, a proposal awaiting confirmation that would give its agent
// more than maxOpen such proposals (0: no limit). The count and the insert
// are one transaction under the lock of the agent's usage row, so
// concurrent proposals of one agent, on any number of instances, cannot
// pass the limit together.
func (s *Store) CreateProposalWithin(ctx context.Context, p *models.Proposal, maxOpen int) (existing *models.Proposal, inserted bool, err error) {
	existing, inserted, _, err = s.CreateProposalSeeingMandates(ctx, p, maxOpen)
	return existing, inserted, err
}

// CreateProposalSeeingMandates is CreateProposalWithin that also tells,
// when it inserted the proposal, whether its tenant had a live mandate
// (models.MandateActive) for its tool as the proposal was inserted: only
// then may a mandate confirm it, and need the mandates be read
// (LiveMandates). It answers true when the commit's outcome had to be read
// back.
func (s *Store) CreateProposalSeeingMandates(ctx context.Context, p *models.Proposal, maxOpen int) (existing *models.Proposal, inserted, mandates bool, err error) {
	row, err := proposalToRow(p)
	if err != nil {
		return nil, false, false, models.Wrap(models.EInternal, err, "cannot encode proposal")
	}
	// The audit entry's body is made before the transaction, so that the
	// one writer is not held for it.
	audit, err := prepared(p.TenantID, p.CreatedAt, proposalCreatedEvent(p))
	if err != nil {
		return nil, false, false, err
	}
	capped := maxOpen > 0 && p.Status == models.StatusAwaitingConfirmation
	err = s.tx(ctx, func(tx *gorm.DB) error {
		if capped {
			if err := lockAgent(tx, p.AgentID); err != nil {
				return err
			}
		}
		qctx, c := raw(tx)
		err := c.QueryRowContext(qctx, insertProposalSQL, append(row.values(), string(models.MandateActive))...).Scan(&mandates)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		inserted = true
		if err := insertFactors(tx, p); err != nil {
			return err
		}
		data := map[string]any{"tool": p.Tool, "risk_tier": p.Tier.Name, "expires_at": models.FormatTime(p.ExpiresAt)}
		if err := s.recordEvents(tx, p.TenantID, p.ID, p.CreatedAt,
			outboxEvent{typ: models.EventCreated, data: data}, outboxEvent{typ: models.StatusEvent(p.Status), data: data}); err != nil {
			return err
		}
		if capped {
			if err := openProposalsLimited(tx, p.AgentID, maxOpen, p.CreatedAt); err != nil {
				return err
			}
		}
		// The audit append stays last: on PostgreSQL it may wait for
		// another transaction's append.
		return appendTimed(tx, p.TenantID, audit)
	})
	if commitUncertain(err) {
		var stored proposalRow
		rerr := s.db.WithContext(ctx).Where("tenant_id = ? AND agent_id = ? AND request_key = ?", p.TenantID, p.AgentID, p.RequestKey).Take(&stored).Error
		switch {
		case rerr == nil && stored.ID == p.ID:
			return nil, true, true, nil
		case rerr == nil:
			inserted, err = false, nil
		default:
			return nil, false, false, models.Wrap(models.EOutcomeUncertain, errors.Join(err, rerr),
				"the database failed while storing the proposal, which may or may not have been stored; retry with the same request_key")
		}
	}
	if err != nil {
		return nil, false, false, err
	}
	if inserted {
		return nil, true, mandates, nil
	}
	var other proposalRow
	err = s.db.WithContext(ctx).Where("tenant_id = ? AND agent_id = ? AND request_key = ?", p.TenantID, p.AgentID, p.RequestKey).Take(&other).Error
	if err != nil {
		return nil, false, false, dbErr(err)
	}
	existing, err = s.GetProposal(ctx, p.TenantID, other.ID)
	return existing, false, false, err
}

// GetProposal returns a proposal of the tenant with its decisions, token and
// execution, or ENotFound (also when it belongs to another tenant).
func (s *Store) GetProposal(ctx context.Context, tenantID, id string) (*models.Proposal, error) {
	var p *models.Proposal
	// One read transaction: the proposal, its decisions, token and
	// execution as of one moment.
	err := s.read.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		p, err = loadProposal(tx, tenantID, id)
		return err
	}, nil)
	if err != nil {
		return nil, dbErr(err)
	}
	return p, nil
}

// proposalWithAgentSQL reads a proposal with its agent's name and the
// agent's owner (id and name, when it has one), in proposalCols' order.
const proposalWithAgentSQL = `SELECT ` + proposalCols + `, a.name, a.owner_user_id, o.name
FROM proposals p JOIN agents a ON a.id = p.agent_id LEFT JOIN users o ON o.id = a.owner_user_id
WHERE p.tenant_id = $1 AND p.id = $2`

func loadProposal(tx *gorm.DB, tenantID, id string) (*models.Proposal, error) {
	var (
		row                proposalRow
		agentName          string
		ownerID, ownerName sql.NullString
	)
	ctx, c := raw(tx)
	err := c.QueryRowContext(ctx, proposalWithAgentSQL, tenantID, id).
		Scan(append(row.fields(), &agentName, &ownerID, &ownerName)...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, models.Errorf(models.ENotFound, "no proposal %q", id)
	}
	if err != nil {
		return nil, err
	}
	p, err := row.model(agentName)
	if err != nil {
		return nil, err
	}
	if ownerID.Valid && ownerName.Valid {
		p.AgentOwnerID, p.AgentOwnerName = ownerID.String, ownerName.String
	}
	if p.Decisions, err = loadDecisions(tx, id); err != nil {
		return nil, err
	}
	var tok tokenRow
	err = tx.Where("proposal_id = ?", id).Limit(1).Find(&tok).Error
	if err != nil {
		return nil, err
	}
	if tok.JTI != "" {
		t := tok.model()
		p.Token = &t
	}
	var ex executionRow
	if err := tx.Where("proposal_id = ?", id).Limit(1).Find(&ex).Error; err != nil {
		return nil, err
	}
	if p.MandateID != "" {
		if err := loadGrantors(tx, p); err != nil {
			return nil, err
		}
	}
	if ex.ID != "" {
		e := ex.model()
		if p.Kind == "" {
			e.MandateID, e.MandateGrantors = p.MandateID, p.MandateGrantors
		}
		p.Execution = &e
	}
	if err := loadCounters(tx, p); err != nil {
		return nil, err
	}
	if err := loadFactors(tx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// ProposalRevision returns a proposal's revision and status cheaply, for
// long-polling. ENotFound for unknown or foreign ids.
func (s *Store) ProposalRevision(ctx context.Context, tenantID, id string) (int64, models.Status, error) {
	var row proposalRow
	err := s.read.WithContext(ctx).Select("revision", "status").
		Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error
	if err != nil {
		return 0, "", notFound(err, "no proposal %q", id)
	}
	return row.Revision, models.Status(row.Status), nil
}

// ListFilter selects proposals for ListProposals.
type ListFilter struct {
	TenantID string
	AgentID  string
	Statuses []models.Status
	Tool     string
	Tier     string
	// Resource keeps the proposals of one target (a resource id, or a
	// batch's set digest).
	Resource string
	// ReviewerID keeps the proposals that reviewer decided.
	ReviewerID string
	// CreatedBefore keeps what was created before it (zero: no bound): a
	// list that starts at a date and goes back, read from the same index
	// as the newest-first list. (A lower bound as well would let SQLite's
	// planner prefer a range over the tenant's whole history.)
	CreatedBefore time.Time
	// Order is newest first (default) or ListExpiring.
	Order  ListOrder
	Cursor string
	Limit  int
	// WithDecisions loads each proposal's decisions and, where its tier
	// names approver groups, their progress (two or three more queries).
	WithDecisions bool
}

// CountProposals counts the tenant's proposals in status (one index
// range: tenant and status).
func (s *Store) CountProposals(ctx context.Context, tenantID string, status models.Status) (int, error) {
	var n int64
	if err := s.read.WithContext(ctx).Model(&proposalRow{}).Where("tenant_id = ? AND status = ?", tenantID, string(status)).
		Count(&n).Error; err != nil {
		return 0, dbErr(err)
	}
	return int(n), nil
}

// ListOrder is the order of a list.
type ListOrder string

// List orders.
const (
	// ListNewest is newest first: creation time, then id, descending.
	ListNewest ListOrder = ""
	// ListExpiring is least time left first: expiry, then id, ascending.
	ListExpiring ListOrder = "expiring"
)

// ListProposals returns one page of the tenant's proposals, newest first
// (by creation time, then id), and the cursor of the next page or "".
// Decisions, tokens and executions are not loaded.
//
// A page costs about the same whatever the history behind it: each status
// of the filter is read from its own index in list order, a page at most
// (see listQuery), so a pending list does not wade through a million
// settled proposals.
func (s *Store) ListProposals(ctx context.Context, f ListFilter) ([]*models.Proposal, string, error) {
	limit := f.Limit
	if limit <= 0 || limit > 100 {
		limit = 50
	}
	q, err := listQuery(s.read.WithContext(ctx), f, limit+1)
	if err != nil {
		return nil, "", err
	}
	var rows []struct {
		Row            proposalRow `gorm:"embedded"`
		AgentName      string
		AgentOwnerID   *string
		AgentOwnerName *string
	}
	if err := q.Scan(&rows).Error; err != nil {
		return nil, "", dbErr(err)
	}
	var next string
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		if f.Order == ListExpiring {
			next = encodeCursor(f.Order, last.Row.ExpiresAt, last.Row.ID)
		} else {
			next = encodeCursor(f.Order, last.Row.CreatedAt, last.Row.ID)
		}
	}
	out := make([]*models.Proposal, 0, len(rows))
	for _, r := range rows {
		p, err := r.Row.model(r.AgentName)
		if err != nil {
			return nil, "", models.Wrap(models.EInternal, err, "corrupt proposal")
		}
		if r.AgentOwnerID != nil && r.AgentOwnerName != nil {
			p.AgentOwnerID, p.AgentOwnerName = *r.AgentOwnerID, *r.AgentOwnerName
		}
		out = append(out, p)
	}
	if f.WithDecisions && len(out) > 0 {
		if err := loadDecisionsOf(s.read.WithContext(ctx), out); err != nil {
			return nil, "", dbErr(err)
		}
		if err := loadFactorsOf(s.read.WithContext(ctx), out); err != nil {
			return nil, "", dbErr(err)
		}
	}
	return out, next, nil
}

// listQuery builds ListProposals' query for n rows. Without a status filter
// it reads the (tenant[, agent], created_at, id) index; with one, it reads
// each status from the (tenant[, agent], status, created_at, id) index, n
// rows at most each, and merges: a status IN (…) over one index would have
// to collect every matching row and sort them. Tool and tier narrow each
// branch further.
func listQuery(db *gorm.DB, f ListFilter, n int) (*gorm.DB, error) {
	var at int64
	var afterID string
	if f.Cursor != "" {
		var err error
		if at, afterID, err = decodeCursor(f.Order, f.Cursor); err != nil {
			return nil, err
		}
	}
	// Newest first reads the (…, created_at, id) indexes backwards; least
	// time left first reads (tenant, status, expires_at, id) forwards.
	key, order, after := "created_at", "DESC", "<"
	if f.Order == ListExpiring {
		key, order, after = "expires_at", "ASC", ">"
	}
	db = db.Session(&gorm.Session{}) // each branch starts a statement of its own
	branch := func(status string) *gorm.DB {
		q := db.Table("proposals AS p").
			Select("p.*, a.name AS agent_name, a.owner_user_id AS agent_owner_id, o.name AS agent_owner_name").
			Joins("JOIN agents a ON a.id = p.agent_id").
			Joins("LEFT JOIN users o ON o.id = a.owner_user_id").
			Where("p.tenant_id = ?", f.TenantID)
		if f.AgentID != "" {
			q = q.Where("p.agent_id = ?", f.AgentID)
		}
		switch status {
		case "":
		case string(models.StatusAwaitingConfirmation):
			// In the words of the partial index that serves the list by
			// time left.
			q = q.Where("p." + awaitingProposal)
		default:
			q = q.Where("p.status = ?", status)
		}
		if f.Tool != "" {
			q = q.Where("p.tool = ?", f.Tool)
		}
		if f.Tier != "" {
			q = q.Where("p.risk_tier = ?", f.Tier)
		}
		if f.Resource != "" {
			q = q.Where("p.resource = ?", f.Resource)
		}
		if f.ReviewerID != "" {
			// One probe of the decisions' (proposal_id, user_id) key per row.
			q = q.Where("EXISTS (SELECT 1 FROM decisions d WHERE d.proposal_id = p.id AND d.user_id = ?)", f.ReviewerID)
		}
		if !f.CreatedBefore.IsZero() {
			q = q.Where("p.created_at < ?", ms(f.CreatedBefore))
		}
		if f.Cursor != "" {
			q = q.Where(fmt.Sprintf("(p.%[1]s %[2]s ? OR (p.%[1]s = ? AND p.id %[2]s ?))", key, after), at, at, afterID)
		}
		return q.Order(fmt.Sprintf("p.%[1]s %[2]s, p.id %[2]s", key, order)).Limit(n)
	}
	statuses := slices.Compact(slices.Sorted(slices.Values(statusStrings(f.Statuses))))
	if len(statuses) == 0 {
		return branch(""), nil
	}
	if len(statuses) == 1 {
		return branch(statuses[0]), nil
	}
	parts := make([]string, len(statuses))
	args := make([]any, 0, len(statuses)+1)
	for i, st := range statuses {
		parts[i] = fmt.Sprintf("SELECT * FROM (?) AS b%d", i)
		args = append(args, branch(st))
	}
	args = append(args, n)
	return db.Raw(strings.Join(parts, " UNION ALL ")+fmt.Sprintf(" ORDER BY %[1]s %[2]s, id %[2]s LIMIT ?", key, order), args...), nil
}

// A cursor is the last row's sort key and id; a cursor of the expiring
// order is marked, so that one order's cursor is refused by the other.
func encodeCursor(o ListOrder, at int64, id string) string {
	prefix := ""
	if o == ListExpiring {
		prefix = "x"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(prefix + strconv.FormatInt(at, 10) + "|" + id))
}

func decodeCursor(o ListOrder, c string) (int64, string, error) {
	bad := models.Errorf(models.EInvalidRequest, "cursor is not one this server issued for this order")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", bad
	}
	s := string(b)
	if marked := strings.HasPrefix(s, "x"); marked != (o == ListExpiring) {
		return 0, "", bad
	}
	s = strings.TrimPrefix(s, "x")
	at, id, ok := strings.Cut(s, "|")
	if !ok || id == "" {
		return 0, "", bad
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, "", bad
	}
	return n, id, nil
}

// transition moves a proposal from any state the machine allows to `to`,
// atomically: the WHERE clause carries the allowed sources, so a concurrent
// change makes it affect no row. extra narrows the condition further.
func transition(tx *gorm.DB, tenantID, id string, to models.Status, now time.Time, extra string, args ...any) (bool, error) {
	return moveProposal(tx, tenantID, id, models.Sources(to), to, 1, now, extra, args...)
}

// transitionThrough is transition for a change through via to to that one
// transaction makes whole, so that nobody sees via: the proposal moves
// from a state via may be reached from straight to to, two revisions on
// (one per step, as two transitions would). to must follow via in the
// state machine (EInternal otherwise); extra narrows the states moved
// from, as in transition.
func transitionThrough(tx *gorm.DB, tenantID, id string, via, to models.Status, now time.Time, extra string, args ...any) (bool, error) {
	if !models.CanTransition(via, to) {
		return false, models.Errorf(models.EInternal, "no transition from %s to %s", via, to)
	}
	return moveProposal(tx, tenantID, id, models.Sources(via), to, 2, now, extra, args...)
}

// moveProposal is the conditional UPDATE of transition and
// transitionThrough: the proposal goes from one of the states from (under
// the condition extra) to to, steps revisions on.
func moveProposal(tx *gorm.DB, tenantID, id string, from []models.Status, to models.Status, steps int, now time.Time, extra string, args ...any) (bool, error) {
	q := "UPDATE proposals SET status = $1, revision = revision + " + strconv.Itoa(steps) +
		", updated_at = $2 WHERE tenant_id = $3 AND id = $4 AND status IN (" + placeholders(5, len(from)) + ")"
	vals := make([]any, 0, 4+len(from)+len(args))
	vals = append(vals, string(to), ms(now), tenantID, id)
	for _, f := range from {
		vals = append(vals, string(f))
	}
	if extra != "" {
		q += " AND " + numbered(extra, 5+len(from))
		vals = append(vals, args...)
	}
	ctx, c := raw(tx)
	n, err := execCount(ctx, c, q, vals...)
	return n == 1, err
}

// Cancel withdraws a proposal that still awaits confirmation, for the agent
// that proposed it; cancelling it again is nil and records nothing.
// ENotFound for unknown, foreign or other agents' proposals;
// EProposalExpired or EInvalidState when it no longer waits for another
// reason.
//
// When the connection fails during the commit, it reads the proposal back:
// cancelled means the commit went through (nil); otherwise
// EOutcomeUncertain, and cancelling again is safe.
func (s *Store) Cancel(ctx context.Context, tenantID, agentID, id string, now time.Time) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, err := transition(tx, tenantID, id, models.StatusCancelled, now,
			"agent_id = ? AND status = ? AND expires_at > ?", agentID, string(models.StatusAwaitingConfirmation), ms(now))
		if err != nil {
			return err
		}
		if ok {
			if err := s.recordEvent(tx, tenantID, id, models.StatusEvent(models.StatusCancelled), now, nil); err != nil {
				return err
			}
			return appendAudit(tx, tenantID, now, proposalEvent(models.AuditProposalCancelled, agentID, id, nil))
		}
		row, err := notAwaitingRow(tx, tenantID, id, agentID)
		if err != nil {
			return err
		}
		// Cancelling again what this agent cancelled is done already (a
		// retry after a lost answer): nothing more is recorded.
		if row.Status == string(models.StatusCancelled) {
			return nil
		}
		return whyNotAwaiting(row, now)
	})
	if commitUncertain(err) {
		var row proposalRow
		rerr := s.db.WithContext(ctx).Select("status").Where("tenant_id = ? AND id = ? AND agent_id = ?", tenantID, id, agentID).Take(&row).Error
		if rerr == nil && row.Status == string(models.StatusCancelled) {
			return nil
		}
		return models.Wrap(models.EOutcomeUncertain, errors.Join(err, rerr),
			"the database failed while cancelling; the proposal may or may not be cancelled: cancel again")
	}
	return err
}

// explainNotAwaiting finds out why a conditional update on an awaiting
// proposal matched nothing and returns the matching domain error.
func explainNotAwaiting(tx *gorm.DB, tenantID, id, agentID string, now time.Time) error {
	row, err := notAwaitingRow(tx, tenantID, id, agentID)
	if err != nil {
		return err
	}
	return whyNotAwaiting(row, now)
}

// notAwaitingRow reads the status and expiry of a proposal a conditional
// update on an awaiting proposal did not match (of agentID's, unless "");
// ENotFound when there is none.
func notAwaitingRow(tx *gorm.DB, tenantID, id, agentID string) (proposalRow, error) {
	var row proposalRow
	q := tx.Select("status", "expires_at").Where("tenant_id = ? AND id = ?", tenantID, id)
	if agentID != "" {
		q = q.Where("agent_id = ?", agentID)
	}
	if err := q.Take(&row).Error; err != nil {
		return row, notFound(err, "no proposal %q", id)
	}
	return row, nil
}

// whyNotAwaiting is the domain error for a proposal row that no longer
// awaits confirmation: expired, or in another state.
func whyNotAwaiting(row proposalRow, now time.Time) error {
	st := models.Status(row.Status)
	if st == models.StatusExpired || (st == models.StatusAwaitingConfirmation && row.ExpiresAt <= ms(now)) {
		return models.Errorf(models.EProposalExpired, "the proposal expired at %s", fromMS(row.ExpiresAt).Format(time.RFC3339))
	}
	return models.Errorf(models.EInvalidState, "the proposal is %s, not awaiting confirmation", st)
}

// ProposalRef names one proposal of one tenant.
type ProposalRef struct {
	TenantID string
	ID       string
}

// ExpireDue moves what has run out of time to expired, atomically per row:
// proposals still awaiting confirmation whose window closed, confirmed
// proposals whose token was never redeemed before its expiry (the token
// becomes expired too), and failed_retryable proposals whose token expired
// before a retry (the execution ends failed_terminal, token_expired). With a proposal id it handles only that proposal (the
// expire-on-read path); with "" it sweeps the whole database. It returns how
// many proposals it expired.
func (s *Store) ExpireDue(ctx context.Context, tenantID, proposalID string, now time.Time) (int, error) {
	refs, err := s.ExpireDueRefs(ctx, tenantID, proposalID, now)
	return len(refs), err
}

// ExpireDueRefs is ExpireDue returning the proposals it expired, so that
// their waiters can be told.
func (s *Store) ExpireDueRefs(ctx context.Context, tenantID, proposalID string, now time.Time) ([]ProposalRef, error) {
	var out []ProposalRef
	err := s.tx(ctx, func(tx *gorm.DB) error {
		out = out[:0]
		var events pendingAudit
		// One conditional UPDATE per proposal, so that each expiry that
		// happens records its event and audit entry; a proposal decided
		// meanwhile is left alone.
		var awaiting []proposalRow
		q := tx.Select("id", "tenant_id").Where(awaitingProposal+" AND expires_at <= ?", ms(now))
		if proposalID != "" {
			q = q.Where("tenant_id = ? AND id = ?", tenantID, proposalID)
		}
		if err := q.Find(&awaiting).Error; err != nil {
			return err
		}
		for _, p := range awaiting {
			ok, err := transition(tx, p.TenantID, p.ID, models.StatusExpired, now,
				"status = ? AND expires_at <= ?", string(models.StatusAwaitingConfirmation), ms(now))
			if err != nil {
				return err
			}
			if ok {
				out = append(out, ProposalRef{TenantID: p.TenantID, ID: p.ID})
				if err := s.recordEvent(tx, p.TenantID, p.ID, models.StatusEvent(models.StatusExpired), now, nil); err != nil {
					return err
				}
				events.add(p.TenantID, proposalEvent(models.AuditProposalExpired, models.ActorSystem, p.ID, nil))
			}
		}

		// Tokens first, then the proposals whose token this statement moved:
		// a token consumed concurrently is no longer 'issued' and is left
		// alone, and so is its proposal.
		var due []tokenRow
		tq := tx.Select("jti", "proposal_id", "tenant_id").Where(issuedToken+" AND expires_at <= ?", ms(now))
		if proposalID != "" {
			tq = tq.Where("tenant_id = ? AND proposal_id = ?", tenantID, proposalID)
		}
		if err := tq.Find(&due).Error; err != nil {
			return err
		}
		for _, t := range due {
			res := tx.Model(&tokenRow{}).Where("jti = ? AND status = ? AND expires_at <= ?", t.JTI, string(models.TokenIssued), ms(now)).
				Update("status", string(models.TokenExpired))
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				continue
			}
			events.add(t.TenantID, proposalEvent(models.AuditTokenExpired, models.ActorSystem, t.ProposalID, map[string]any{"jti": t.JTI}))
			ok, err := transition(tx, t.TenantID, t.ProposalID, models.StatusExpired, now, "status = ?", string(models.StatusConfirmed))
			if err != nil {
				return err
			}
			if ok {
				out = append(out, ProposalRef{TenantID: t.TenantID, ID: t.ProposalID})
				if err := s.recordEvent(tx, t.TenantID, t.ProposalID, models.StatusEvent(models.StatusExpired), now,
					map[string]any{"token_expired": true}); err != nil {
					return err
				}
			}
		}

		// Failed attempts whose confirmation ran out: the business system
		// refused for now and wrote nothing, and no retry may follow after
		// exp, so the execution ends failed_terminal (token_expired) and
		// the proposal expired. Each row moves by a conditional UPDATE that
		// a concurrent retry's claim (which needs expires_at > now) or
		// revocation cannot also win. Each row's token is read by its key,
		// not gathered from every token that ever expired.
		var stale []executionRow
		eq := tx.Select("id", "tenant_id", "proposal_id").
			Where(openExecution+" AND status = ? AND lease_until <= ?", string(models.StatusFailedRetryable), ms(now)).
			Where("EXISTS (SELECT 1 FROM tokens t WHERE t.jti = executions.token_jti AND t.expires_at <= ?)", ms(now))
		if proposalID != "" {
			eq = eq.Where("tenant_id = ? AND proposal_id = ?", tenantID, proposalID)
		}
		if err := eq.Find(&stale).Error; err != nil {
			return err
		}
		for _, e := range stale {
			res := tx.Model(&executionRow{}).
				Where("id = ? AND status = ? AND lease_until <= ?", e.ID, string(models.StatusFailedRetryable), ms(now)).
				Updates(map[string]any{"status": string(models.StatusFailedTerminal), "error_code": string(models.ETokenExpired),
					"error_message": "the confirmation expired before the failed attempt could be retried; nothing was written",
					"updated_at":    ms(now), "completed_at": ms(now)})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				continue
			}
			ok, err := transition(tx, e.TenantID, e.ProposalID, models.StatusExpired, now, "status = ?", string(models.StatusFailedRetryable))
			if err != nil {
				return err
			}
			if ok {
				out = append(out, ProposalRef{TenantID: e.TenantID, ID: e.ProposalID})
				if err := s.recordEvent(tx, e.TenantID, e.ProposalID, models.StatusEvent(models.StatusExpired), now,
					map[string]any{"retry_expired": true}); err != nil {
					return err
				}
				events.add(e.TenantID, proposalEvent(models.AuditProposalExpired, models.ActorSystem, e.ProposalID,
					map[string]any{"execution_id": e.ID, "retry_expired": true}))
			}
		}
		return events.flush(tx, now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ProposalByRequestKey returns the agent's proposal with that request key,
// or ENotFound. Request keys are idempotent per agent: another agent's
// proposal with the same key is never found here.
func (s *Store) ProposalByRequestKey(ctx context.Context, tenantID, agentID, requestKey string) (*models.Proposal, error) {
	var row proposalRow
	err := s.db.WithContext(ctx).Select("id").Where("tenant_id = ? AND agent_id = ? AND request_key = ?", tenantID, agentID, requestKey).Take(&row).Error
	if err != nil {
		return nil, notFound(err, "no proposal with that request key")
	}
	return s.GetProposal(ctx, tenantID, row.ID)
}
