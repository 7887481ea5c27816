-- pgbench: the floor's dispatch on the narrow row's schema
-- (narrow_schema.sql, `-only moving`): floor_dispatch.sql's four steps, the
-- claim and the outcome moving the narrow row and reading the wide one for
-- the payment. :bd is set with -D bd=N.
WITH locked AS (
    SELECT id FROM river_job
    WHERE state = 'available' AND queue = 'floor' AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, id
    LIMIT :bd
    FOR UPDATE SKIP LOCKED
), fetched AS (
    UPDATE river_job j SET state = 'running', attempt = j.attempt + 1, attempted_at = now(),
        attempted_by = array_append(j.attempted_by, 'floor')
    FROM locked WHERE j.id = locked.id
    RETURNING j.id, j.args
)
SELECT coalesce(string_agg(id::text, ','), '') AS jobs, coalesce(string_agg(args ->> 'fulfilment_id', ','), '') AS ids FROM fetched
\gset

WITH u AS (SELECT unnest(string_to_array(:ids, ',')::uuid[]) AS id), moved AS (
    UPDATE fulfilment_move m SET state = 'dispatching', attempt = m.attempt + 1, dispatched_at = now(),
        deadline = now() + interval '30 seconds', claim_token = md5(m.id::text), claimant = 'floor', call_outcome = NULL
    FROM u JOIN fulfilment f ON f.id = u.id
    WHERE m.id = u.id AND m.id = ANY (string_to_array(:ids, ',')::uuid[]) AND m.state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM guardian_reversals_of(f.provider, f.payment_id) r WHERE f.action_name = ANY (r.revokes))
    RETURNING m.id, f.event_pk, f.provider, f.payment_id, m.attempt, f.idempotency_key
), logged AS (
    INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
    SELECT id, 'pending', 'dispatching', attempt, 'dispatcher', 'dispatch claimed', '{"claimant":"floor"}' FROM moved
)
SELECT count(e.body), count(p.detail) FROM moved m JOIN webhook_event e ON e.id = m.event_pk
    LEFT JOIN purchase p ON p.provider = m.provider AND p.payment_id = m.payment_id;

WITH moved AS (
    UPDATE fulfilment_move m SET state = 'fulfilled', call_outcome = 'done'
    WHERE m.id = ANY (string_to_array(:ids, ',')::uuid[]) AND m.state = 'dispatching' AND m.attempt = 1
    RETURNING m.id, m.attempt
), logged AS (
    INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
    SELECT id, 'dispatching', 'fulfilled', attempt, 'dispatcher', 'connector outcome: done', '{"outcome":"done"}' FROM moved
)
SELECT count(*) FROM moved;

UPDATE river_job SET state = 'completed', finalized_at = now()
WHERE id = ANY (string_to_array(:jobs, ',')::bigint[]) AND state = 'running';
