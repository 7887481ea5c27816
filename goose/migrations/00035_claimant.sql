-- +goose Up
-- Who claimed a fulfilment's current attempt (issue 32): a fact the
-- protocol decides on (a dispatch that finds the row dispatching parks its
-- own earlier try's claim and leaves another job's live one), so a typed
-- column, written by the claim, not the transition's evidence read back.
-- Rows a decision may still read (dispatching, parked) take theirs from
-- the claim's transition once.
ALTER TABLE fulfilment ADD COLUMN claimant text;
UPDATE fulfilment f SET claimant = (
    SELECT t.evidence ->> 'claimant' FROM fulfilment_transition t
    WHERE t.fulfilment_id = f.id AND t.to_state = 'dispatching' AND t.attempt = f.attempt
    ORDER BY t.id DESC LIMIT 1)
WHERE f.state IN ('dispatching', 'needs_reconciliation');

-- +goose Down
ALTER TABLE fulfilment DROP COLUMN claimant;
