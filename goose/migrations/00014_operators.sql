-- +goose Up
-- Named operator credentials. Each operator may hold several at once (to
-- rotate: add a new one, then revoke the old), each a random token of which
-- only the SHA-256 is kept. The operator's name is the audit actor of every
-- decision made with the credential. Revoking a credential ends its
-- dashboard sessions at their next request; sessions_after ends them
-- without revoking.
CREATE TABLE operator_credential (
    id             bigserial   PRIMARY KEY,
    operator       text        NOT NULL CHECK (operator ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$'),
    token_hash     bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at     timestamptz NOT NULL DEFAULT now(),
    sessions_after timestamptz,
    revoked_at     timestamptz
);
CREATE INDEX operator_credential_operator ON operator_credential (operator);

-- Server secrets shared by every process of one database. session_key
-- signs dashboard sessions: 32 bytes from two version-4 UUIDs (244 random
-- bits from the server's strong random source).
CREATE TABLE guardian_secret (
    name       text        PRIMARY KEY,
    value      bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO guardian_secret (name, value)
VALUES ('session_key', uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));

-- +goose Down
DROP TABLE guardian_secret;
DROP TABLE operator_credential;
