-- +goose Up
-- One body per signed transmission (issue 31). PayPal signs a delivery's
-- transmission id, time and webhook id and only a CRC32 of the body, which
-- anyone can match with a body of their choice: the body first seen under
-- a transmission id is bound to it by its SHA-256, and a second body under
-- the same id is refused (reason rebound). Kept seven days, beyond PayPal's
-- three days of retries (jobs.MaintenanceWorker prunes them).
CREATE TABLE signed_transmission (
    provider        text        NOT NULL,
    transmission_id text        NOT NULL,
    body_sha256     bytea       NOT NULL CHECK (length(body_sha256) = 32),
    seen_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, transmission_id)
);
CREATE INDEX signed_transmission_seen_at ON signed_transmission (seen_at);

-- +goose Down
DROP TABLE signed_transmission;
