-- +goose Up
-- The outcome of a fulfilment's current attempt's call (issue 32): a fact
-- the protocol decides on (a lookup's "not done" fails a row parked by a
-- refusal, and sends any other again), so a typed column written by the
-- move that records the call, and cleared by the claim of the next
-- attempt, no longer the parking transition's evidence read back. Parked
-- rows take theirs from that transition once.
ALTER TABLE fulfilment ADD COLUMN call_outcome text
    CHECK (call_outcome IN ('unknown', 'done', 'not_sent', 'declined', 'not_delivered', 'refused'));
UPDATE fulfilment f SET call_outcome = (
    SELECT t.evidence ->> 'outcome' FROM fulfilment_transition t
    WHERE t.fulfilment_id = f.id AND t.attempt = f.attempt AND t.to_state = 'needs_reconciliation'
      AND t.evidence ->> 'outcome' IN ('unknown', 'done', 'not_sent', 'declined', 'not_delivered', 'refused')
    ORDER BY t.id DESC LIMIT 1)
WHERE f.state = 'needs_reconciliation';

-- +goose Down
ALTER TABLE fulfilment DROP COLUMN call_outcome;
