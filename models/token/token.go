// Package token issues and verifies countersign's confirmation tokens (SPEC
// section 5): compact JWS objects signed with Ed25519 (alg EdDSA) whose
// payload is a models.Claims.
//
// Signing keys live in the database (models/store), are created on first start
// by EnsureKey and replaced by Rotate; retired keys keep verifying, and every
// public key is published as a JWKS. A Service caches the keys and re-reads
// the store when a token names a key it does not know, so that instances see
// each other's rotations.
//
// Verify proves only that a token was signed by one of our keys and is well
// formed. It deliberately does not look at aud, sub, tenant, exp or any other
// claim: the execution layer compares those with the stored proposal and the
// injected clock, and the consumption record prevents replay.
package token

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/internal/jsonscan"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

const (
	// tokenType is the JWS "typ" header of every confirmation token. Verify
	// requires it, so a JWS made with our keys for another purpose is never
	// taken for a confirmation.
	tokenType = "countersign-confirmation+jwt"
	// keyIDPrefix starts every key id this package creates.
	keyIDPrefix = "k_"
	// maxTokenLen bounds the work an unauthenticated string can cause before
	// its signature is checked. Real tokens are well under 2 KiB.
	maxTokenLen = 32 << 10
	// maxKeyIDLen bounds a kid read from an untrusted header.
	maxKeyIDLen = 128
)

// Caller-safe problems of the invalid_signature errors Verify and
// VerifyDocument return, said of the document (see refusal). They say what
// is wrong in general terms and nothing about keys or internals.
const (
	msgMalformed  = "is not a well-formed compact JWS"
	msgAlgorithm  = "must be signed with EdDSA"
	msgHeader     = "has an unsupported header"
	msgUnknownKey = "is not signed by a known key"
	msgSignature  = "signature is not valid"
	msgClaims     = "claims are malformed"
)

// documentName is what a JWS of type typ is called in messages.
func documentName(typ string) string {
	switch typ {
	case TypeReceipt:
		return "receipt"
	case TypeCheckpoint:
		return "audit checkpoint"
	}
	return "confirmation token"
}

// refusal is the EInvalidSignature error for problem of a JWS of type typ
// ("receipt signature is not valid"), with cause for the logs when given.
func refusal(typ, problem string, cause error) *models.Error {
	msg := documentName(typ) + " " + problem
	if cause != nil {
		return models.Wrap(models.EInvalidSignature, cause, msg)
	}
	return models.Errorf(models.EInvalidSignature, "%s", msg)
}

// keyStore is what the service reads and writes of *store.Store. It is an
// interface only so that this package's tests can fail and hold key reads
// (reload coalescing, store errors); everything else passes the store.
// AddKey must be atomic: the new key becomes the only active one.
type keyStore interface {
	// SigningKeys returns all keys, newest first, including retired ones.
	SigningKeys(ctx context.Context) ([]models.SigningKey, error)
	// AddKey inserts k and makes it the only active key, retiring the
	// previous active key, in one transaction.
	AddKey(ctx context.Context, k models.SigningKey) error
}

// Config configures a Service.
type Config struct {
	// Issuer is this service's "iss" value, for callers building claims.
	Issuer string
	// Audience is this service's "aud" value, for callers building and
	// checking claims.
	Audience string
	// Clock stamps new keys' CreatedAt; nil means models.SystemClock.
	Clock models.Clock
}

// Service signs and verifies confirmation tokens with the keys in the store.
// It is safe for concurrent use.
type Service struct {
	store keyStore
	cfg   Config

	// reloadSem admits one store read at a time (a buffered channel so that
	// waiting honours the context); callers that were waiting take the result
	// of a read that started after they asked, instead of reading again.
	reloadSem chan struct{}
	// ensureSem keeps one Service from racing itself in EnsureKey.
	ensureSem chan struct{}

	mu      sync.RWMutex
	keys    map[string]models.SigningKey // by kid
	order   []string                     // kids, newest first, as the store lists them
	active  string                       // kid of the signing key; "" if none
	started uint64                       // store reads started
	loaded  uint64                       // number (per started) of the last successful read; 0 = never
}

// New returns a Service over store. It does not touch the store: call
// EnsureKey at start so that there is a key to sign with.
func New(st *store.Store, cfg Config) *Service { return newService(st, cfg) }

func newService(store keyStore, cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = models.SystemClock{}
	}
	return &Service{
		store:     store,
		cfg:       cfg,
		reloadSem: make(chan struct{}, 1),
		ensureSem: make(chan struct{}, 1),
	}
}

// Issuer returns the configured issuer ("iss").
func (s *Service) Issuer() string { return s.cfg.Issuer }

// Audience returns the configured audience ("aud").
func (s *Service) Audience() string { return s.cfg.Audience }

// EnsureKey makes sure the store holds an active signing key, creating the
// first one if there is none (or if the active one has no private half), and
// loads the keys. It is idempotent, and
// instances racing at first start all end up able to sign and verify: each
// re-reads the store after adding, so whichever key won is known to all.
// It returns EUnavailable when the store fails and EInternal when the store
// holds malformed keys or still has no active key after adding one.
func (s *Service) EnsureKey(ctx context.Context) error {
	if err := acquire(ctx, s.ensureSem); err != nil {
		return err
	}
	defer release(s.ensureSem)

	if err := s.reload(ctx); err != nil {
		return err
	}
	if s.hasActive() {
		return nil
	}
	if _, err := s.addKey(ctx); err != nil {
		return err
	}
	if !s.hasActive() {
		return models.Errorf(models.EInternal, "key store has no active signing key after adding one")
	}
	return nil
}

// Rotate creates a new key and makes it the active one; older keys keep
// verifying. It returns the new key's id, EUnavailable when the store fails,
// or EInternal when no key can be made.
func (s *Service) Rotate(ctx context.Context) (kid string, err error) {
	return s.addKey(ctx)
}

// Sign signs c with the active key and returns the compact JWS and the key id.
// It fills nothing in: the caller sets every claim. It returns EInternal for
// claims missing jti, sub, tenant, aud, op, args_digest, proposal_id or
// request_key, with exp <= iat or with a string that is not valid UTF-8 (JSON
// would silently change it), for a token larger than Verify accepts (32 KiB),
// and when there is no active private key (call EnsureKey first). A store error while loading keys is EUnavailable.
func (s *Service) Sign(ctx context.Context, c models.Claims) (compact, kid string, err error) {
	if err := checkClaims(c); err != nil {
		return "", "", err
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", "", models.Wrap(models.EInternal, err, "claims cannot be encoded")
	}
	if compact, kid, err = s.signActive(ctx, tokenType, payload); err != nil {
		return "", "", err
	}
	if len(compact) > maxTokenLen {
		return "", "", models.Errorf(models.EInternal, "token of %d bytes exceeds the %d Verify accepts", len(compact), maxTokenLen)
	}
	return compact, kid, nil
}

// Verify checks that compact is a confirmation token signed by one of our keys
// and returns its claims. It checks only the signature and the structure, not
// aud, sub, tenant, exp or any other claim's value.
//
// It returns EInvalidSignature (with a caller-safe message) for anything that
// is not exactly a compact JWS (three non-empty segments of canonical
// unpadded base64url, no JSON serialization), a header other than
// {"alg":"EdDSA","kid":…,"typ":"countersign-confirmation+jwt"} (so no "none",
// HS256, ES256, crit, b64, jwk or jku), a missing or unknown kid, a bad
// signature, and a payload that is not a single JSON object of well-typed
// claims without duplicate names. An unknown kid makes it re-read the store
// once, in case another instance rotated; a store error then is EUnavailable,
// and malformed key material in the store is EInternal.
func (s *Service) Verify(ctx context.Context, compact string) (models.Claims, error) {
	j, err := splitTyped(compact, tokenType)
	if err != nil {
		return models.Claims{}, err
	}
	pub, err := s.publicKey(ctx, tokenType, j.kid)
	if err != nil {
		return models.Claims{}, err
	}
	if err := j.verify(pub); err != nil {
		return models.Claims{}, err
	}
	c, err := decodeClaims(j.payload)
	if err != nil {
		return models.Claims{}, refusal(tokenType, msgClaims, err)
	}
	return c, nil
}

// JWKS returns the public keys as a JSON Web models.SigningKey Set, {"keys":[…]}, newest
// first: each key is OKP/Ed25519 with kid, "alg":"EdDSA" and "use":"sig".
// Private material is never included. It re-reads the store so that keys made
// by other instances are published; a store error is EUnavailable.
func (s *Service) JWKS(ctx context.Context) ([]byte, error) {
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(s.order))}
	for _, kid := range s.order {
		k := s.keys[kid]
		set.Keys = append(set.Keys, jose.JSONWebKey{
			// Only the public half, copied, ever reaches the encoder.
			Key:       ed25519.PublicKey(bytes.Clone(k.Public)),
			KeyID:     k.ID,
			Algorithm: string(jose.EdDSA),
			Use:       "sig",
		})
	}
	s.mu.RUnlock()
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return nil, models.Errorf(models.EInternal, "JWKS would contain non-public key %s", k.KeyID)
		}
	}
	out, err := json.Marshal(set)
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "JWKS cannot be encoded")
	}
	return out, nil
}

// addKey creates a key, stores it as the active one and re-reads the store.
func (s *Service) addKey(ctx context.Context) (string, error) {
	k, err := newKey(s.cfg.Clock.Now())
	if err != nil {
		return "", err
	}
	if err := s.store.AddKey(ctx, k); err != nil {
		return "", models.Wrap(models.EUnavailable, err, "signing key cannot be stored")
	}
	if err := s.reload(ctx); err != nil {
		return "", err
	}
	return k.ID, nil
}

// newKey makes a fresh active Ed25519 key with a random id.
func newKey(now time.Time) (models.SigningKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return models.SigningKey{}, models.Wrap(models.EInternal, err, "signing key cannot be generated")
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return models.SigningKey{}, models.Wrap(models.EInternal, err, "key id cannot be generated")
	}
	return models.SigningKey{
		ID:        keyIDPrefix + hex.EncodeToString(id[:]),
		Private:   priv,
		Public:    pub,
		CreatedAt: now,
		Active:    true,
	}, nil
}

// publicKey returns the verifying key for kid, re-reading the store once when
// the kid is not cached.
func (s *Service) publicKey(ctx context.Context, typ, kid string) (ed25519.PublicKey, error) {
	s.mu.RLock()
	k, ok := s.keys[kid]
	s.mu.RUnlock()
	if ok {
		return k.Public, nil
	}
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	k, ok = s.keys[kid]
	s.mu.RUnlock()
	if !ok {
		return nil, refusal(typ, msgUnknownKey, nil)
	}
	return k.Public, nil
}

// hasActive reports whether the cache has an active key that can sign.
func (s *Service) hasActive() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.keys[s.active].Private != nil
}

func (s *Service) neverLoaded() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.loaded == 0
}

// reload replaces the cache with the store's keys. Reads are serialized; a
// caller that had to wait skips its own read when a read that started after it
// called has succeeded meanwhile: that read already saw everything the caller
// could need (a key stored before the call, e.g. by another instance's
// rotation). This bounds store reads under a burst of unknown kids.
func (s *Service) reload(ctx context.Context) error {
	s.mu.RLock()
	ticket := s.started
	s.mu.RUnlock()

	if err := acquire(ctx, s.reloadSem); err != nil {
		return err
	}
	defer release(s.reloadSem)

	s.mu.Lock()
	if s.loaded > ticket {
		s.mu.Unlock()
		return nil
	}
	s.started++
	n := s.started
	s.mu.Unlock()

	stored, err := s.store.SigningKeys(ctx)
	if err != nil {
		return models.Wrap(models.EUnavailable, err, "signing keys are unavailable")
	}
	keys, order, active, err := index(stored)
	if err != nil {
		return err
	}

	s.mu.Lock()
	s.keys, s.order, s.active, s.loaded = keys, order, active, n
	s.mu.Unlock()
	return nil
}

// index validates the store's keys and indexes copies of them by id. The
// active key is the first (newest) one marked active. Malformed key material
// is EInternal: the store is corrupt and nothing should be signed or verified
// with a guess.
func index(stored []models.SigningKey) (map[string]models.SigningKey, []string, string, error) {
	keys := make(map[string]models.SigningKey, len(stored))
	order := make([]string, 0, len(stored))
	active := ""
	for _, k := range stored {
		if !validKeyID(k.ID) {
			return nil, nil, "", models.Errorf(models.EInternal, "stored signing key has invalid id %q", k.ID)
		}
		if _, dup := keys[k.ID]; dup {
			return nil, nil, "", models.Errorf(models.EInternal, "stored signing key id %s is not unique", k.ID)
		}
		if len(k.Public) != ed25519.PublicKeySize {
			return nil, nil, "", models.Errorf(models.EInternal, "stored signing key %s has a public key of %d bytes", k.ID, len(k.Public))
		}
		c := models.SigningKey{ID: k.ID, Public: bytes.Clone(k.Public), CreatedAt: k.CreatedAt, Active: k.Active}
		if k.Private != nil {
			if len(k.Private) != ed25519.PrivateKeySize {
				return nil, nil, "", models.Errorf(models.EInternal, "stored signing key %s has a private key of %d bytes", k.ID, len(k.Private))
			}
			pub, ok := k.Private.Public().(ed25519.PublicKey)
			if !ok || !pub.Equal(k.Public) {
				return nil, nil, "", models.Errorf(models.EInternal, "stored signing key %s has halves that do not match", k.ID)
			}
			c.Private = bytes.Clone(k.Private)
		}
		if k.Active && active == "" {
			active = k.ID
		}
		keys[k.ID] = c
		order = append(order, k.ID)
	}
	return keys, order, active, nil
}

// checkClaims is Sign's refusal of claims that could not bind a write.
func checkClaims(c models.Claims) error {
	required := []struct{ name, value string }{
		{"jti", c.ID}, {"sub", c.Subject}, {"tenant", c.Tenant}, {"aud", c.Audience},
		{"op", c.Operation}, {"args_digest", c.ArgsDigest}, {"proposal_id", c.ProposalID},
		{"request_key", c.RequestKey},
	}
	for _, r := range required {
		if r.value == "" {
			return models.Errorf(models.EInternal, "token claim %s is missing", r.name)
		}
	}
	if c.Expiry <= c.IssuedAt {
		return models.Errorf(models.EInternal, "token claim exp (%d) is not after iat (%d)", c.Expiry, c.IssuedAt)
	}
	strs := []string{c.Issuer, c.Audience, c.Subject, c.Tenant, c.ID, c.Operation, c.Resource,
		c.ResourceSetDigest, c.ArgsDigest, c.Policy, c.RequestKey, c.ProposalID, c.MandateID}
	strs = append(strs, c.Approvers...)
	strs = append(strs, c.AMR...)
	for _, v := range strs {
		if !utf8.ValidString(v) {
			return models.Errorf(models.EInternal, "token claims contain a string that is not valid UTF-8")
		}
	}
	return nil
}

// parseTyped checks a compact JWS whose header must carry typ (splitTyped)
// and returns its kid and decoded payload.
func parseTyped(compact, typ string) (kid string, payload []byte, err error) {
	j, err := splitTyped(compact, typ)
	return j.kid, j.payload, err
}

// compactJWS is a compact JWS as splitTyped checked it: its header was
// exactly {alg: EdDSA, kid, typ}, each segment strict base64url.
type compactJWS struct {
	typ     string
	kid     string
	payload []byte
	// signed is the JWS signing input exactly as presented: the header
	// and payload segments joined by a dot.
	signed string
	sig    []byte
}

// splitTyped checks the form of an untrusted compact JWS of type typ before
// any key is looked up, and splits it: three non-empty segments of
// canonical unpadded base64url (so that no two strings decode to the same
// JWS), a header of exactly alg (EdDSA), kid and typ (typ as given; nothing
// else, so no "crit" either) and an Ed25519-sized signature. It does not verify the signature (see
// compactJWS.verify). EInvalidSignature for anything else.
func splitTyped(compact, typ string) (compactJWS, error) {
	if compact == "" {
		return compactJWS{}, refusal(typ, "is missing", nil)
	}
	if len(compact) > maxTokenLen {
		return compactJWS{}, refusal(typ, msgMalformed, nil)
	}
	h, rest, ok := strings.Cut(compact, ".")
	if !ok {
		return compactJWS{}, refusal(typ, msgMalformed, nil)
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return compactJWS{}, refusal(typ, msgMalformed, nil)
	}
	var raw [3][]byte
	for i, seg := range [3]string{h, p, sig} {
		var err error
		if raw[i], err = decodeSegment(seg); err != nil {
			return compactJWS{}, refusal(typ, msgMalformed, err)
		}
	}
	kid, err := checkHeader(raw[0], typ)
	if err != nil {
		return compactJWS{}, err
	}
	if len(raw[2]) != ed25519.SignatureSize {
		return compactJWS{}, refusal(typ, msgSignature, nil)
	}
	return compactJWS{typ: typ, kid: kid, payload: raw[1], signed: compact[:len(h)+1+len(p)], sig: raw[2]}, nil
}

// verify checks the Ed25519 signature over the signing input as presented
// (RFC 7515 section 5.2: the ASCII of the first two segments).
// EInvalidSignature when it does not verify or pub is not an Ed25519
// public key.
func (j compactJWS) verify(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return refusal(j.typ, msgSignature, nil)
	}
	if !ed25519.Verify(pub, []byte(j.signed), j.sig) {
		return refusal(j.typ, msgSignature, nil)
	}
	return nil
}

// strictB64 rejects non-zero padding bits; the alphabet check in
// decodeSegment rejects the CR and LF it would still ignore.
var strictB64 = base64.RawURLEncoding.Strict()

func decodeSegment(p string) ([]byte, error) {
	if p == "" {
		return nil, errors.New("empty segment")
	}
	for i := 0; i < len(p); i++ {
		if !urlSafe(p[i]) {
			return nil, fmt.Errorf("byte %#x at %d is not base64url", p[i], i)
		}
	}
	return strictB64.DecodeString(p)
}

func urlSafe(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_'
}

func validKeyID(kid string) bool {
	if kid == "" || len(kid) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(kid); i++ {
		if !urlSafe(kid[i]) {
			return false
		}
	}
	return true
}

// checkHeader accepts exactly the protected header Sign writes. Anything more
// (crit, b64, jwk, jku, x5c, …) is refused rather than interpreted.
func checkHeader(h []byte, wantTyp string) (string, error) {
	fields, err := objectFields(h)
	if err != nil {
		return "", refusal(wantTyp, msgMalformed, err)
	}
	var alg, kid, typ string
	for name, v := range fields {
		var dst *string
		switch name {
		case "alg":
			dst = &alg
		case "kid":
			dst = &kid
		case "typ":
			dst = &typ
		default:
			return "", refusal(wantTyp, msgHeader, nil)
		}
		if err := json.Unmarshal(v, dst); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return "", refusal(wantTyp, msgHeader, nil)
		}
	}
	if alg != string(jose.EdDSA) {
		return "", refusal(wantTyp, msgAlgorithm, nil)
	}
	if typ != wantTyp {
		// Each signed kind has its own typ: a receipt is never taken for
		// a token, nor a token for a receipt.
		if len(typ) > 64 {
			return "", refusal(wantTyp, "is of another kind", nil)
		}
		return "", refusal(wantTyp, fmt.Sprintf("is of another kind (JWS typ %q)", typ), nil)
	}
	if !validKeyID(kid) {
		return "", refusal(wantTyp, msgUnknownKey, nil)
	}
	return kid, nil
}

// claimNames are the JSON names of models.Claims.
var claimNames = []string{"iss", "aud", "sub", "tenant", "jti", "op", "resource",
	"resource_set_digest", "args_digest", "policy", "request_key", "proposal_id",
	"approvers", "amr", "iat", "exp", "mandate_id"}

// decodeClaims decodes a verified payload. encoding/json would take null or
// an array for a struct, keep the last of duplicate names, match names
// case-insensitively and replace invalid UTF-8; each of those would let the
// signed bytes and the claims we act on differ, so each is refused here.
// Unknown claim names are tolerated so that a newer instance's tokens verify
// during a rolling upgrade.
//
// The names come from one walk over the payload when none of them holds an
// escape (every token countersign signs); the Unmarshal into the claims
// then refuses what is not one JSON text. A payload whose names hold
// escapes, or that the walk cannot follow, has its names decoded by
// objectFields, which parses it once more.
func decodeClaims(payload []byte) (models.Claims, error) {
	if !utf8.Valid(payload) {
		return models.Claims{}, errors.New("payload is not valid UTF-8")
	}
	names, plain, err := plainMemberNames(payload)
	if err != nil {
		return models.Claims{}, err
	}
	if !plain {
		fields, err := objectFields(payload)
		if err != nil {
			return models.Claims{}, err
		}
		names = slices.Collect(maps.Keys(fields))
	}
	for _, name := range names {
		for _, known := range claimNames {
			if name != known && strings.EqualFold(name, known) {
				return models.Claims{}, fmt.Errorf("claim %q differs from %q only in case", name, known)
			}
		}
	}
	var c models.Claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return models.Claims{}, err
	}
	return c, nil
}

// plainMemberNames returns the member names of the object doc when a walk
// over it reaches its end and none of its names holds an escape (plain):
// they are then its names exactly, if doc is JSON at all, which the caller
// still has to check. A name given twice is an error. plain is false, and
// there are no names, for anything else: a name with an escape (two
// spellings may name one member) or a text the walk cannot follow.
func plainMemberNames(doc []byte) (names []string, plain bool, err error) {
	if t := bytes.TrimLeft(doc, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false, errors.New("not a JSON object")
	}
	plain = true
	names = make([]string, 0, len(claimNames))
	walked := jsonscan.Walk(doc, jsonscan.Visitor{Name: func(depth int, raw []byte, escaped bool) bool {
		if depth != 1 {
			return true
		}
		if escaped {
			plain = false
			return false
		}
		for _, n := range names {
			if n == string(raw) {
				err = errors.New("duplicate member name")
				return false
			}
		}
		names = append(names, string(raw))
		return true
	}})
	switch {
	case err != nil:
		return nil, false, err
	case !walked || !plain:
		return nil, false, nil
	}
	return names, true, nil
}

// objectFields parses doc as exactly one JSON object and returns its members,
// refusing duplicate names and trailing data.
func objectFields(doc []byte) (map[string]json.RawMessage, error) {
	if t := bytes.TrimLeft(doc, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	// Unmarshal refuses what is not one JSON text (trailing data too);
	// it keeps the last of duplicate members, so their number is compared
	// with the members the text names.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(doc, &fields); err != nil {
		return nil, err
	}
	if topLevelMembers(doc) != len(fields) {
		return nil, errors.New("duplicate member name")
	}
	return fields, nil
}

// topLevelMembers counts the members of the JSON object doc (valid JSON):
// the names at depth one.
func topLevelMembers(doc []byte) int {
	n := 0
	jsonscan.Walk(doc, jsonscan.Visitor{Name: func(depth int, _ []byte, _ bool) bool {
		if depth == 1 {
			n++
		}
		return true
	}})
	return n
}

func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return models.Wrap(models.EUnavailable, ctx.Err(), "signing keys are unavailable")
	}
}

func release(sem chan struct{}) { <-sem }
