-- +goose Up
-- The claim's own token (issue 32): each Dispatch call draws one and the
-- claim stores it, so a dispatcher whose claim's commit answer was lost (a
-- Postgres blip, a reset connection) can read the row back and know the
-- claim is its own, made by the call that is still running and has not
-- called out: proof that nothing was sent, so the row goes back to pending
-- under the same key and body. A claim found by anyone else (another call,
-- the same job retried after a crash) parks, as before. A fact the protocol
-- decides on, so a typed column, not the transition's evidence.
ALTER TABLE fulfilment ADD COLUMN claim_token text;

-- +goose Down
ALTER TABLE fulfilment DROP COLUMN claim_token;
