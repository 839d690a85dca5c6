package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

// floor does the durable work of an execute and of a create directly with
// database/sql: no HTTP, no ORM, nothing beyond what the work needs.
type floor struct {
	db   *sql.DB
	pg   bool
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	tool *registry.Tool
	seq  int
}

const floorSchema = `
CREATE TABLE floor_tokens (jti TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, agent_id TEXT NOT NULL,
  status TEXT NOT NULL, expires_at BIGINT NOT NULL, consumed_at BIGINT, execution_id TEXT);
CREATE TABLE floor_executions (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, token_jti TEXT NOT NULL UNIQUE,
  status TEXT NOT NULL, result TEXT NOT NULL, created_at BIGINT NOT NULL);
CREATE TABLE floor_outbox (tenant_id TEXT NOT NULL, request_key TEXT NOT NULL, customer_id TEXT NOT NULL,
  body TEXT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (tenant_id, request_key));
CREATE TABLE floor_proposals (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, agent_id TEXT NOT NULL,
  tool TEXT NOT NULL, arguments TEXT NOT NULL, args_digest TEXT NOT NULL, request_key TEXT NOT NULL,
  status TEXT NOT NULL, created_at BIGINT NOT NULL, UNIQUE (tenant_id, request_key));
`

func newFloor(ctx context.Context, db *sql.DB, pg bool) (*floor, error) {
	for _, stmt := range strings.Split(floorSchema, ";") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("floor schema: %w", err)
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	tool, ok := registry.Demo().Tool("send_customer_email")
	if !ok {
		return nil, errors.New("the demo registry has no send_customer_email")
	}
	return &floor{db: db, pg: pg, pub: pub, priv: priv, tool: tool}, nil
}

// q turns ? placeholders into PostgreSQL's $n.
func (f *floor) q(s string) string {
	if !f.pg {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type floorClaims struct {
	ID       string `json:"jti"`
	Issuer   string `json:"iss"`
	Audience string `json:"aud"`
	Subject  string `json:"sub"`
	Tenant   string `json:"tid"`
	Proposal string `json:"pid"`
	Expiry   int64  `json:"exp"`
}

var b64 = base64.RawURLEncoding

// tokens stores n issued tokens and returns them signed (not measured).
func (f *floor) tokens(ctx context.Context, n int) ([]string, error) {
	out := make([]string, n)
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	exp := time.Now().Add(5 * time.Minute)
	header := b64.EncodeToString([]byte(`{"alg":"EdDSA","typ":"JWT"}`))
	for i := range n {
		f.seq++
		c := floorClaims{ID: fmt.Sprintf("jti_%d", f.seq), Issuer: "countersign", Audience: "countersign:execute",
			Subject: "agt_floor", Tenant: "ten_floor", Proposal: fmt.Sprintf("prop_%d", f.seq), Expiry: exp.Unix()}
		payload, _ := json.Marshal(c)
		signing := header + "." + b64.EncodeToString(payload)
		out[i] = signing + "." + b64.EncodeToString(ed25519.Sign(f.priv, []byte(signing)))
		if _, err := tx.ExecContext(ctx, f.q("INSERT INTO floor_tokens (jti, tenant_id, agent_id, status, expires_at) VALUES (?, ?, ?, 'issued', ?)"),
			c.ID, c.Tenant, c.Subject, exp.UnixMilli()); err != nil {
			return nil, err
		}
	}
	return out, tx.Commit()
}

// verify checks a compact token's signature and claims.
func (f *floor) verify(compact string, now time.Time) (floorClaims, error) {
	var c floorClaims
	i := strings.LastIndexByte(compact, '.')
	j := strings.IndexByte(compact, '.')
	if i < 0 || j == i {
		return c, errors.New("malformed token")
	}
	sig, err := b64.DecodeString(compact[i+1:])
	if err != nil || !ed25519.Verify(f.pub, []byte(compact[:i]), sig) {
		return c, errors.New("bad signature")
	}
	payload, err := b64.DecodeString(compact[j+1 : i])
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, err
	}
	if c.Issuer != "countersign" || c.Audience != "countersign:execute" || !now.Before(time.Unix(c.Expiry, 0)) {
		return c, errors.New("claims refused")
	}
	return c, nil
}

// execute is the floor of one execute.
func (f *floor) execute(ctx context.Context, compact string) error {
	now := time.Now()
	c, err := f.verify(compact, now)
	if err != nil {
		return err
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	exe := models.NewID("exe")
	res, err := tx.ExecContext(ctx, f.q(`UPDATE floor_tokens SET status = 'consumed', consumed_at = ?, execution_id = ?
		WHERE jti = ? AND tenant_id = ? AND agent_id = ? AND status = 'issued' AND expires_at > ?`),
		now.UnixMilli(), exe, c.ID, c.Tenant, c.Subject, now.UnixMilli())
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("token %s not consumed (%v)", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx, f.q("INSERT INTO floor_outbox (tenant_id, request_key, customer_id, body, created_at) VALUES (?, ?, ?, ?, ?)"),
		c.Tenant, c.ID, "cus_001", "Message", now.UnixMilli()); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, f.q("INSERT INTO floor_executions (id, tenant_id, token_jti, status, result, created_at) VALUES (?, ?, ?, 'succeeded', ?, ?)"),
		exe, c.Tenant, c.ID, `{"queued":true}`, now.UnixMilli()); err != nil {
		return err
	}
	return tx.Commit()
}

// create is the floor of one create: decode the request, validate and
// normalize the arguments against the tool's schema, digest them, and one
// INSERT.
func (f *floor) create(ctx context.Context, body []byte) error {
	var req struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	// Prepare digests the canonical arguments too (Prepared.Digest), as
	// for a create.
	prep, err := f.tool.Prepare(req.Arguments)
	if err != nil {
		return err
	}
	id := models.NewID("prop")
	_, err = f.db.ExecContext(ctx, f.q(`INSERT INTO floor_proposals (id, tenant_id, agent_id, tool, arguments, args_digest, request_key, status, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, 'awaiting_confirmation', ?)`),
		id, "ten_floor", "agt_floor", req.Tool, string(prep.Arguments), prep.Digest, id, time.Now().UnixMilli())
	return err
}
