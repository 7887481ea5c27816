-- pgbench: the floor's intake. The bare SQL a batch of :bi new paying
-- events needs on its way into Guardian, with no Go and the fewest round
-- trips the work allows: one statement, one commit, on Guardian's own
-- tables (their indexes, constraints and triggers): the events, their
-- purchases, one fulfilment per payment (its identity and its moving
-- state) with its first transition, one
-- dispatch job each (what recordBatchTx writes). floor_dispatch.sql takes
-- the jobs on; `just bench` runs them apart and together, with Guardian's
-- own batch sizes, and holds every figure against them (docs/performance.md,
-- "The floor"). :bi is set with -D bi=N; :provider with -D provider=NAME
-- ("floor", its payments apart from Guardian's, unless the run says).
WITH ev AS (
    INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body, amount, currency)
    SELECT :provider, 'evt_' || u, 'payment_intent.succeeded', 'pi_' || u,
        convert_to('{"id":"evt_' || u || '","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_' || u || '","object":"payment_intent","amount":4200,"currency":"eur","status":"succeeded"}}}', 'UTF8'),
        4200, 'eur'
    FROM (SELECT gen_random_uuid()::text AS u FROM generate_series(1, :bi)) g
    ORDER BY u
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING id, provider, payment_id
), bought AS (
    INSERT INTO purchase (provider, payment_id, actions, routes)
    SELECT provider, payment_id, '{fulfil}', '' FROM ev
    ON CONFLICT DO NOTHING
), created AS (
    INSERT INTO fulfilment_identity (event_pk, provider, payment_id, action_name, idempotency_key)
    SELECT id, provider, payment_id, 'fulfil', guardian_action_key(provider, payment_id, 'fulfil', 0) FROM ev
    ORDER BY provider, payment_id
    ON CONFLICT (provider, payment_id, action_name, action) WHERE NOT failed DO NOTHING
    RETURNING id, created_at, action, provider, payment_id, action_name
), moving AS (
    INSERT INTO fulfilment_move (id, created_at, action, provider, payment_id, action_name)
    SELECT id, created_at, action, provider, payment_id, action_name FROM created
), logged AS (
    INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason)
    SELECT id, NULL, 'pending', 0, 'intake', 'payment event received' FROM created
)
INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, tags, priority)
SELECT jsonb_build_object('fulfilment_id', id), 'floor_dispatch', 100, 'floor', 'available', now(), '{}', 1 FROM created;
