-- +goose Up
-- Refused webhook requests and why, for operators: bounded (the sweep keeps
-- seven days and at most 100,000 rows) and never holding the body, headers
-- or any id from the request: an unverified request's content is the
-- sender's word, and storing it would let anyone write into the database.
CREATE TABLE refused_delivery (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    -- a configured provider's name, or 'unknown'
    provider   text        NOT NULL,
    reason     text        NOT NULL CHECK (reason IN ('signature', 'timestamp', 'malformed', 'too_large', 'unreadable', 'unknown_provider', 'invalid')),
    -- Guardian's own answer to the sender, at most 300 characters
    detail     text        NOT NULL DEFAULT '' CHECK (length(detail) <= 300),
    client     text        NOT NULL DEFAULT '',
    body_bytes integer     NOT NULL DEFAULT 0 CHECK (body_bytes >= 0)
);
CREATE INDEX refused_delivery_at_idx ON refused_delivery (at);

-- +goose Down
DROP TABLE refused_delivery;
