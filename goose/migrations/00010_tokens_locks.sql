-- Single-use tokens, their durable consumption record, and Guardian's own
-- locks with fencing numbers.

-- +goose Up
-- A token is stored only as the SHA-256 of its value.
CREATE TABLE single_use_token (
    hash       bytea       PRIMARY KEY CHECK (length(hash) = 32),
    purpose    text        NOT NULL CHECK (purpose <> ''),
    payload    jsonb       NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX single_use_token_expires_idx ON single_use_token (expires_at);

-- Every redemption made through a store that can forget (Redis) is recorded
-- here before it counts, so a restore from an older snapshot cannot bring a
-- consumed token back.
CREATE TABLE token_consumption (
    hash        bytea       PRIMARY KEY CHECK (length(hash) = 32),
    consumed_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX token_consumption_expires_idx ON token_consumption (expires_at);

-- A lock held by one holder (token) until expires_at; fence grows by one with
-- every acquisition and never goes back.
CREATE TABLE guardian_lock (
    name       text        PRIMARY KEY,
    token      text        NOT NULL,
    fence      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The highest fencing number a guarded resource has accepted: a write under
-- a smaller one is from a holder that lost its lock.
CREATE TABLE lock_fence (
    name  text   PRIMARY KEY,
    fence bigint NOT NULL
);

-- +goose Down
DROP TABLE lock_fence;
DROP TABLE guardian_lock;
DROP TABLE token_consumption;
DROP TABLE single_use_token;
