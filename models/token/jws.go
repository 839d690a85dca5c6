package token

import (
	"context"
	"crypto/ed25519"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/models"
)

// Other documents signed with the token keys. Each has its own JWS "typ",
// so that no signed document can be taken for another kind: a receipt is
// never a confirmation token, a checkpoint never a receipt.
const (
	// TypeReceipt is the typ of an execution receipt (models.SignedReceipt).
	TypeReceipt = "countersign-receipt+jwt"
	// TypeCheckpoint is the typ of an audit-chain checkpoint
	// (models.CheckpointClaims).
	TypeCheckpoint = "countersign-audit-checkpoint+jwt"
)

// SignDocument signs payload (a JSON object) with the active key under the
// JWS type typ, which must be TypeReceipt or TypeCheckpoint, and returns the
// compact JWS and the key id. It never touches the store once keys are
// loaded, so it may run inside a database transaction. EInternal when there
// is no active private key or the payload is not a JSON object.
func (s *Service) SignDocument(ctx context.Context, typ string, payload []byte) (compact, kid string, err error) {
	if typ != TypeReceipt && typ != TypeCheckpoint {
		return "", "", models.Errorf(models.EInternal, "unknown document type %q", typ)
	}
	if _, err := objectFields(payload); err != nil {
		return "", "", models.Wrap(models.EInternal, err, "document is not a JSON object")
	}
	return s.signActive(ctx, jose.ContentType(typ), payload)
}

// SignStruct encodes v with encoding/json and signs it as SignDocument
// does, returning the payload it signed too. When v is a struct (or a
// pointer to one) with no JSON or text encoding of its own, encoding/json
// writes it as one JSON object whose member names are unique (it drops
// names that conflict), so the object check SignDocument makes on bytes of
// unknown origin is not repeated; any other v is checked like them.
// EInternal when v cannot be encoded or is not an object.
func (s *Service) SignStruct(ctx context.Context, typ string, v any) (compact, kid string, payload []byte, err error) {
	if typ != TypeReceipt && typ != TypeCheckpoint {
		return "", "", nil, models.Errorf(models.EInternal, "unknown document type %q", typ)
	}
	if payload, err = json.Marshal(v); err != nil {
		return "", "", nil, models.Wrap(models.EInternal, err, "document cannot be encoded")
	}
	if !plainStruct(v) {
		if _, err := objectFields(payload); err != nil {
			return "", "", nil, models.Wrap(models.EInternal, err, "document is not a JSON object")
		}
	}
	compact, kid, err = s.signActive(ctx, jose.ContentType(typ), payload)
	return compact, kid, payload, err
}

// plainStruct reports whether v is a non-nil struct or pointer to one that
// encoding/json encodes field by field.
func plainStruct(v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return false
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return false
	}
	t := rv.Type()
	for _, m := range []reflect.Type{reflect.TypeFor[json.Marshaler](), reflect.TypeFor[encoding.TextMarshaler]()} {
		if t.Implements(m) || reflect.PointerTo(t).Implements(m) {
			return false
		}
	}
	return true
}

// signActive signs payload with the active key under the JWS type typ and
// returns the compact JWS and the key id: the one signing step of tokens,
// receipts and checkpoints. The protected header is exactly
// {"alg":"EdDSA","kid":…,"typ":…} in that order, and the signature is
// Ed25519 over the signing input (RFC 7515 5.1). EInternal when there is
// no active private key.
func (s *Service) signActive(ctx context.Context, typ jose.ContentType, payload []byte) (compact, kid string, err error) {
	if s.neverLoaded() {
		if err := s.reload(ctx); err != nil {
			return "", "", err
		}
	}
	s.mu.RLock()
	k, ok := s.keys[s.active]
	s.mu.RUnlock()
	if !ok {
		return "", "", models.Errorf(models.EInternal, "no active signing key")
	}
	if len(k.Private) != ed25519.PrivateKeySize {
		return "", "", models.Errorf(models.EInternal, "active signing key %s has no private half", k.ID)
	}
	header, err := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
		Typ string `json:"typ"`
	}{string(jose.EdDSA), k.ID, string(typ)})
	if err != nil {
		return "", "", models.Wrap(models.EInternal, err, "header cannot be encoded")
	}
	enc := base64.RawURLEncoding
	buf := make([]byte, 0, enc.EncodedLen(len(header))+1+enc.EncodedLen(len(payload))+1+enc.EncodedLen(ed25519.SignatureSize))
	buf = enc.AppendEncode(buf, header)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, payload)
	sig := ed25519.Sign(k.Private, buf)
	buf = append(buf, '.')
	buf = enc.AppendEncode(buf, sig)
	return string(buf), k.ID, nil
}

// VerifyDocument checks a compact JWS of type typ against one of our keys
// (re-reading the store once for an unknown kid) and returns its payload and
// key id. EInvalidSignature for anything else.
func (s *Service) VerifyDocument(ctx context.Context, typ, compact string) (payload []byte, kid string, err error) {
	kid, _, err = parseTyped(compact, typ)
	if err != nil {
		return nil, "", err
	}
	pub, err := s.publicKey(ctx, typ, kid)
	if err != nil {
		return nil, "", err
	}
	payload, err = VerifyWithKey(typ, compact, pub)
	return payload, kid, err
}

// PublicKeys is a set of verifying keys by kid, as read from a JWKS.
type PublicKeys map[string]ed25519.PublicKey

// ParseJWKS reads a JSON Web Key Set of OKP/Ed25519 keys (what
// Service.JWKS publishes). Keys of other types are skipped; a set without a
// single Ed25519 key, or with a private key, is EInvalidRequest.
func ParseJWKS(doc []byte) (PublicKeys, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(doc, &set); err != nil {
		return nil, models.Wrap(models.EInvalidRequest, err, "the JWKS is not a JSON Web Key Set")
	}
	out := PublicKeys{}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return nil, models.Errorf(models.EInvalidRequest, "the JWKS holds a private key (%s)", k.KeyID)
		}
		pub, ok := k.Key.(ed25519.PublicKey)
		if !ok || !validKeyID(k.KeyID) {
			continue
		}
		out[k.KeyID] = pub
	}
	if len(out) == 0 {
		return nil, models.Errorf(models.EInvalidRequest, "the JWKS holds no Ed25519 key")
	}
	return out, nil
}

// Verify checks a compact JWS of type typ against the set, offline, and
// returns its payload and key id. EInvalidSignature when the header is not
// exactly {alg: EdDSA, kid, typ}, the kid is not in the set or the
// signature does not verify.
func (ks PublicKeys) Verify(typ, compact string) (payload []byte, kid string, err error) {
	kid, _, err = parseTyped(strings.TrimSpace(compact), typ)
	if err != nil {
		return nil, "", err
	}
	pub, ok := ks[kid]
	if !ok {
		return nil, kid, models.Errorf(models.EInvalidSignature, "signed by key %s, which the JWKS does not hold", kid)
	}
	payload, err = VerifyWithKey(typ, strings.TrimSpace(compact), pub)
	return payload, kid, err
}

// VerifyWithKey checks a compact JWS of type typ against pub and returns its
// payload (a JSON object). EInvalidSignature on any failure.
func VerifyWithKey(typ, compact string, pub ed25519.PublicKey) ([]byte, error) {
	j, err := splitTyped(compact, typ)
	if err != nil {
		return nil, err
	}
	if err := j.verify(pub); err != nil {
		return nil, err
	}
	if _, err := objectFields(j.payload); err != nil {
		return nil, models.Wrap(models.EInvalidSignature, err, "the signed payload is not a JSON object")
	}
	return j.payload, nil
}
