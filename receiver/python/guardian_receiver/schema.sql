-- The table Guardian's receiver kit keeps its keys in (the same in every kit:
-- receiver/vectors.json). Idempotent; copy it into your own migrations.
CREATE TABLE IF NOT EXISTS guardian_receiver_key (
    idempotency_key text        PRIMARY KEY,
    body_sha256     bytea       NOT NULL,
    status          text        NOT NULL CHECK (status IN ('done', 'declined')),
    answer          jsonb       NOT NULL,
    test            boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now()
);
