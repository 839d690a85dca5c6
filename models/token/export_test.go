package token

// KeyStore and NewOver let the tests put an in-memory key store with
// injected failures and held reads between the service and its keys.
type KeyStore = keyStore

func NewOver(ks KeyStore, cfg Config) *Service { return newService(ks, cfg) }

// ObjectFields is the strict JSON object parser of headers and claims.
var ObjectFields = objectFields

// DecodeClaims is the strict decoder of a verified payload's claims, and
// ClaimNames the names it compares case-insensitively.
var (
	DecodeClaims = decodeClaims
	ClaimNames   = claimNames
)
