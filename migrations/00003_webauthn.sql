-- +goose Up

-- Reviewers' security keys and passkeys (WebAuthn credentials). Every field
-- the relying party needs later is kept: the COSE public key, the highest
-- signature counter seen, the authenticator flags (backup eligibility never
-- changes; backup state may), transports, AAGUID and the raw attestation.
-- Binary values are base64url text so that one schema serves both
-- databases. A key is never deleted: removal and clone warnings are
-- timestamps, and the history keeps naming the key an approval used.
CREATE TABLE webauthn_credentials (
    id                    TEXT PRIMARY KEY,
    tenant_id             TEXT NOT NULL REFERENCES tenants(id),
    user_id               TEXT NOT NULL REFERENCES users(id),
    credential_id         TEXT NOT NULL UNIQUE,
    name                  TEXT NOT NULL,
    public_key            TEXT NOT NULL,
    public_key_algorithm  BIGINT NOT NULL DEFAULT 0,
    attestation_type      TEXT NOT NULL DEFAULT '',
    attestation_format    TEXT NOT NULL DEFAULT '',
    aaguid                TEXT NOT NULL DEFAULT '',
    sign_count            BIGINT NOT NULL DEFAULT 0 CHECK (sign_count >= 0 AND sign_count <= 4294967295),
    flags                 INTEGER NOT NULL DEFAULT 0,
    user_present          BOOLEAN NOT NULL DEFAULT FALSE,
    user_verified         BOOLEAN NOT NULL DEFAULT FALSE,
    backup_eligible       BOOLEAN NOT NULL DEFAULT FALSE,
    backup_state          BOOLEAN NOT NULL DEFAULT FALSE,
    transports            TEXT NOT NULL DEFAULT '[]',
    attachment            TEXT NOT NULL DEFAULT '',
    attestation           TEXT NOT NULL DEFAULT '',
    extensions            TEXT NOT NULL DEFAULT '',
    created_at            BIGINT NOT NULL,
    last_used_at          BIGINT,
    flagged_at            BIGINT,
    removed_at            BIGINT
);
CREATE INDEX webauthn_credentials_user ON webauthn_credentials (tenant_id, user_id);

-- WebAuthn ceremonies between begin and finish: the library's session data
-- and, for an approval, the proposal, the digest shown and the single-use
-- nonce of the transaction challenge. Held here rather than in a cookie or
-- in memory so that any instance can finish what another began; consumed
-- once by a conditional UPDATE (consumed_at IS NULL AND expires_at > now).
-- A finish finds its ceremony by the challenge the client data carries.
-- user_id is empty only for a passkey sign-in, where the key names the user.
CREATE TABLE webauthn_ceremonies (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id),
    user_id       TEXT REFERENCES users(id),
    kind          TEXT NOT NULL CHECK (kind IN ('registration', 'enrollment', 'assertion', 'removal', 'login')),
    proposal_id   TEXT REFERENCES proposals(id),
    args_digest   TEXT NOT NULL DEFAULT '',
    key_id        TEXT REFERENCES webauthn_credentials(id),
    nonce         TEXT NOT NULL DEFAULT '',
    challenge     TEXT NOT NULL UNIQUE,
    session_data  TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    consumed_at   BIGINT
);
CREATE INDEX webauthn_ceremonies_expires ON webauthn_ceremonies (expires_at);

-- +goose Down
DROP TABLE webauthn_ceremonies;
DROP TABLE webauthn_credentials;
