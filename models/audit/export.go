// Package audit makes the audit log provable outside the server: the JSON
// Lines export that carries a tenant's chain with its signed checkpoints,
// evidence, credentials, receipts and public keys, and the offline
// verification of receipts against such an export (`countersign verify`).
package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/checkpoint"
	"github.com/countersign/countersign/models/stepup"
)

// ExportFormat names the layout of an export; it changes if the layout does.
const ExportFormat = "countersign.audit.export.v1"

// The lines of an export, one JSON object per line, told apart by "type":
//
//	{"type":"header","format":…,"tenant":…,"tenant_name":…,"since":…,"exported_at":…}
//	{"type":"jwks","jwks":{"keys":[…]}}                 the public keys
//	{"type":"entry","seq":N,"hash":"sha256:…","body":"…"}  in chain order
//	{"type":"checkpoint","seq":N,"hash":…,"jws":…}
//	{"type":"evidence","proposal_id":…,"decision_id":…,"evidence":"…"}
//	{"type":"credential","user_id":…,"credential_id":…,"public_key":…,"name":…}
//	{"type":"receipt","proposal_id":…,"execution_id":…,"jws":…}
//
// An entry's body and a decision's evidence are carried as JSON strings
// holding the exact stored bytes, since their hashes are over those bytes:
// a verifier hashes the string's UTF-8 bytes and never re-encodes.
type Line struct {
	Type string `json:"type"`

	Format     string `json:"format,omitempty"`
	Tenant     string `json:"tenant,omitempty"`
	TenantName string `json:"tenant_name,omitempty"`
	Since      string `json:"since,omitempty"`
	ExportedAt string `json:"exported_at,omitempty"`

	JWKS json.RawMessage `json:"jwks,omitempty"`

	Seq  int64  `json:"seq,omitempty"`
	Hash string `json:"hash,omitempty"`
	Body string `json:"body,omitempty"`

	JWS string `json:"jws,omitempty"`

	ProposalID  string `json:"proposal_id,omitempty"`
	DecisionID  string `json:"decision_id,omitempty"`
	Evidence    string `json:"evidence,omitempty"`
	ExecutionID string `json:"execution_id,omitempty"`

	UserID       string `json:"user_id,omitempty"`
	CredentialID string `json:"credential_id,omitempty"`
	PublicKey    string `json:"public_key,omitempty"`
	Name         string `json:"name,omitempty"`
}

// Exporter writes exports.
type Exporter struct {
	checkpoint.Checkpointer
}

// Export writes the tenant's chain from the first entry made at or after
// since to the head as JSON Lines, after making sure the head is under a
// signed checkpoint: the header, the JWKS, the entries, the checkpoints
// among them, and for every proposal the entries mention, its security-key
// evidence, the registered credentials that evidence names and the signed
// receipts. It returns the number of entries written.
func (x Exporter) Export(ctx context.Context, w io.Writer, tenant models.Tenant, since, now time.Time) (int, error) {
	// The export ends at this checkpoint: entries appended meanwhile (the
	// server keeps running) wait for the next export.
	cp, ok, err := x.CheckpointTenant(ctx, tenant.ID, now)
	if err != nil {
		return 0, err
	}
	last := int64(0)
	if ok {
		last = cp.Seq
	}
	jwks, err := x.Tokens.JWKS(ctx)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	put := func(l Line) error { return enc.Encode(l) }
	if err := put(Line{Type: "header", Format: ExportFormat, Tenant: tenant.ID, TenantName: tenant.Name,
		Since: since.UTC().Format(time.RFC3339), ExportedAt: now.UTC().Format(time.RFC3339)}); err != nil {
		return 0, err
	}
	if err := put(Line{Type: "jwks", JWKS: jwks}); err != nil {
		return 0, err
	}
	entries, err := x.Store.AuditEntriesSince(ctx, tenant.ID, since, 1000)
	if err != nil {
		return 0, err
	}
	n := 0
	var proposals []string
	seen := map[string]bool{}
	first := int64(0)
	for len(entries) > 0 {
		for _, e := range entries {
			if e.Seq > last {
				entries = nil
				break
			}
			if first == 0 {
				first = e.Seq
			}
			if err := put(Line{Type: "entry", Seq: e.Seq, Hash: e.Hash, Body: e.Body}); err != nil {
				return n, err
			}
			n++
			if e.ProposalID != "" && !seen[e.ProposalID] {
				seen[e.ProposalID] = true
				proposals = append(proposals, e.ProposalID)
			}
		}
		if len(entries) == 0 {
			break
		}
		if entries, err = x.Store.AuditEntries(ctx, tenant.ID, entries[len(entries)-1].Seq, 1000); err != nil {
			return n, err
		}
	}
	if first > 0 {
		cps, err := x.Store.Checkpoints(ctx, tenant.ID, first)
		if err != nil {
			return n, err
		}
		for _, c := range cps {
			if c.Seq > last {
				break
			}
			if err := put(Line{Type: "checkpoint", Seq: c.Seq, Hash: c.Hash, JWS: c.JWS}); err != nil {
				return n, err
			}
		}
	}
	creds := map[string]bool{}
	for _, id := range proposals {
		p, err := x.Store.GetProposal(ctx, tenant.ID, id)
		if err != nil {
			return n, err
		}
		for _, d := range p.Decisions {
			if len(d.Evidence) == 0 {
				continue
			}
			if err := put(Line{Type: "evidence", ProposalID: p.ID, DecisionID: d.ID, Evidence: string(d.Evidence)}); err != nil {
				return n, err
			}
			ev, err := stepup.ParseEvidence(d.Evidence)
			if err != nil || creds[ev.CredentialID] {
				continue
			}
			creds[ev.CredentialID] = true
			k, err := x.Store.SecurityKeyByCredentialID(ctx, tenant.ID, ev.CredentialIDBytes())
			if models.IsCode(err, models.ENotFound) {
				continue
			}
			if err != nil {
				return n, err
			}
			if err := put(Line{Type: "credential", UserID: k.UserID, CredentialID: ev.CredentialID,
				PublicKey: base64.RawURLEncoding.EncodeToString(k.PublicKey), Name: k.Name}); err != nil {
				return n, err
			}
		}
		if p.Execution != nil && p.Execution.ReceiptJWS != "" {
			if err := put(Line{Type: "receipt", ProposalID: p.ID, ExecutionID: p.Execution.ID, JWS: p.Execution.ReceiptJWS}); err != nil {
				return n, err
			}
		}
	}
	return n, bw.Flush()
}

// Export is a parsed export (or several files read together: a JWKS file,
// an evidence file).
type Export struct {
	// Header reports whether a header line was read: an export has one,
	// a JWKS document or a file of evidence lines has none.
	Header      bool
	Tenant      string
	JWKS        json.RawMessage
	Entries     []ExportedEntry
	Checkpoints []ExportedCheckpoint
	// Evidence by decision id, as stored.
	Evidence    map[string]string
	Credentials map[string]Line // by credential id
	Receipts    []Line
}

// ExportedEntry is an entry line and where it was.
type ExportedEntry struct {
	Line int
	Seq  int64
	Hash string
	Body string
}

// ExportedCheckpoint is a checkpoint line and where it was.
type ExportedCheckpoint struct {
	Line int
	Seq  int64
	Hash string
	JWS  string
}

// maxLine bounds one line of an export (evidence and entries are small).
const maxLine = 4 << 20

// Read adds the lines of r (an export, a JWKS document or an evidence file)
// to x. name is how errors call the input. A line that is not one JSON
// object of a known type is EInvalidRequest naming the line.
func (x *Export) Read(name string, r io.Reader) error {
	if x.Evidence == nil {
		x.Evidence = map[string]string{}
		x.Credentials = map[string]Line{}
	}
	data, err := io.ReadAll(io.LimitReader(r, 1<<30))
	if err != nil {
		return models.Wrap(models.EInvalidRequest, err, "cannot read "+name)
	}
	trimmed := bytes.TrimSpace(data)
	var probe struct {
		Keys json.RawMessage `json:"keys"`
	}
	if json.Unmarshal(trimmed, &probe) == nil && probe.Keys != nil {
		// A bare JWKS document (one JSON value with "keys").
		x.JWKS = json.RawMessage(trimmed)
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l Line
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return models.Errorf(models.EInvalidRequest, "%s line %d is not a valid export line: %v", name, n, err)
		}
		switch l.Type {
		case "header":
			if l.Format != ExportFormat {
				return models.Errorf(models.EInvalidRequest, "%s line %d: format %q is not %q", name, n, l.Format, ExportFormat)
			}
			x.Header, x.Tenant = true, l.Tenant
		case "jwks":
			x.JWKS = l.JWKS
		case "entry":
			x.Entries = append(x.Entries, ExportedEntry{Line: n, Seq: l.Seq, Hash: l.Hash, Body: l.Body})
		case "checkpoint":
			x.Checkpoints = append(x.Checkpoints, ExportedCheckpoint{Line: n, Seq: l.Seq, Hash: l.Hash, JWS: l.JWS})
		case "evidence":
			x.Evidence[l.DecisionID] = l.Evidence
		case "credential":
			x.Credentials[l.CredentialID] = l
		case "receipt":
			x.Receipts = append(x.Receipts, l)
		default:
			return models.Errorf(models.EInvalidRequest, "%s line %d has unknown type %q", name, n, l.Type)
		}
	}
	if err := sc.Err(); err != nil {
		return models.Wrap(models.EInvalidRequest, err, fmt.Sprintf("cannot read %s after line %d", name, n))
	}
	return nil
}
