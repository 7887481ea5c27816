-- pgbench: the floor's dispatch. The bare SQL a batch of :bd payments
-- needs from a dispatch job to its completion, one commit per step, each
-- step one statement, on Guardian's own tables:
--
--   1. River's fetch of :bd available jobs (JobGetAvailable);
--   2. the claim: pending to dispatching with the next attempt, its
--      deadline and claim, the reversal guard, the transition, the event's
--      body and purchase read back for the call (ClaimManyForDispatch,
--      whose rows are found by their ids alone, the state only checked);
--   3. the outcome: dispatching to fulfilled at that attempt, with its
--      transition (TransitMany);
--   4. the jobs' completion (River's JobSetStateIfRunningMany).
--
-- It takes whichever jobs floor_intake.sql left available, as River does:
-- another client's, perhaps, never a payment twice. The ids pass between
-- steps as text through \gset, each a parameter of a prepared statement
-- (pgbench -M prepared), as Guardian's are: planned once per connection,
-- not per batch. :bd is set with -D bd=N.
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
    UPDATE fulfilment_move s SET state = 'dispatching', attempt = s.attempt + 1, dispatched_at = now(),
        deadline = now() + interval '30 seconds', claim_token = md5(s.id::text), claimant = 'floor', call_outcome = NULL
    FROM u, fulfilment_identity f
    WHERE s.id = u.id AND s.id = ANY (string_to_array(:ids, ',')::uuid[]) AND f.id = s.id AND (s.state = 'pending') IS TRUE
      AND NOT EXISTS (SELECT 1 FROM guardian_reversals_of(f.provider, f.payment_id) r WHERE f.action_name = ANY (r.revokes))
    RETURNING s.id, f.event_pk, f.provider, f.payment_id, s.attempt, f.idempotency_key
), logged AS (
    INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
    SELECT id, 'pending', 'dispatching', attempt, 'dispatcher', 'dispatch claimed', '{"claimant":"floor"}' FROM moved
)
SELECT count(e.body), count(p.detail) FROM moved m JOIN webhook_event e ON e.id = m.event_pk
    LEFT JOIN purchase p ON p.provider = m.provider AND p.payment_id = m.payment_id;

WITH moved AS (
    UPDATE fulfilment_move s SET state = 'fulfilled', call_outcome = 'done'
    WHERE s.id = ANY (string_to_array(:ids, ',')::uuid[]) AND s.state = 'dispatching' AND s.attempt = 1
    RETURNING s.id, s.attempt
), logged AS (
    INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason, evidence)
    SELECT id, 'dispatching', 'fulfilled', attempt, 'dispatcher', 'connector outcome: done', '{"outcome":"done"}' FROM moved
)
SELECT count(*) FROM moved;

UPDATE river_job SET state = 'completed', finalized_at = now()
WHERE id = ANY (string_to_array(:jobs, ',')::bigint[]) AND state = 'running';
