-- +goose Up
-- One payment's reversals, read through the indexes whatever the history.
--
-- payment_reversal (migration 00044) is a union of two queries, and
-- Postgres cannot pass a join's values into a union whose parts filter or
-- join: a statement that joined it to its rows (a semi join from EXISTS in
-- WHERE, or a plain join) read every reversal stored for each row it
-- weighed. Taking back one payment read all of them three times (15,000
-- rows beside 5,000 reversals; db.TestTakeBackReadsItsOwnReversals).
--
-- guardian_reversals_of is the view's rule for one payment. As a SQL
-- function of one SELECT it is inlined where it is called: in FROM with
-- the row's columns as its arguments, each part of the union gets them as
-- index conditions. The view stays for reading every reversal at once
-- (the sweep's hourly round), and db.TestReversalsOfAPaymentAreTheViews
-- holds the two to the same rows.
-- +goose StatementBegin
CREATE FUNCTION guardian_reversals_of(reversed_provider text, reversed_payment text)
RETURNS TABLE (id bigint, event_id text, revokes text[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT e.id, e.event_id, e.revokes
    FROM webhook_event e
    WHERE e.provider = reversed_provider COLLATE "default" AND e.reverses = reversed_payment COLLATE "C"
    UNION ALL
    SELECT e.id, e.event_id, e.revokes
    FROM purchase g JOIN webhook_event e ON e.provider = g.provider AND e.reverses = g.root
    WHERE g.provider = reversed_provider COLLATE "default" AND g.payment_id = reversed_payment COLLATE "C"
      AND g.root IS NOT NULL AND e.suspends IS NULL
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION guardian_reversals_of(text, text);
