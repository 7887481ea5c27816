-- pgbench: the SQL of one Guardian intake transaction for a new fulfilling
-- event: event insert, fulfilment insert with its first transition, River
-- job insert, one transaction per event: Guardian before batching
-- (app/fulfilment recordOne), without Go. The baseline the batched intake
-- is held against. Run with -M prepared: each statement planned once per
-- connection, as Guardian's are (planning every statement anew made this
-- baseline a third slower here).
BEGIN;
INSERT INTO webhook_event (provider, event_id, event_type, payment_id, body)
VALUES ('pgbench', 'evt_' || gen_random_uuid(), 'payment_intent.succeeded', 'pi_' || gen_random_uuid(),
        convert_to('{"id":"evt","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi","object":"payment_intent","amount":4200,"currency":"eur"}}}', 'UTF8'))
ON CONFLICT (provider, event_id) DO NOTHING RETURNING id \gset
WITH created AS (
    INSERT INTO fulfilment (event_pk, provider, payment_id, idempotency_key)
    SELECT :id::bigint, 'pgbench', payment_id, guardian_idempotency_key('pgbench', payment_id, 0) FROM webhook_event WHERE id = :id::bigint
    ON CONFLICT DO NOTHING RETURNING id
), logged AS (
    INSERT INTO fulfilment_transition (fulfilment_id, from_state, to_state, attempt, actor, reason)
    SELECT id, NULL, 'pending', 0, 'intake', 'payment event received' FROM created
)
SELECT id FROM created;
INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, tags)
VALUES (json_build_object('fulfilment_id', (SELECT id FROM fulfilment WHERE event_pk = :id::bigint))::jsonb, 'pgbench_dispatch', 100, 'pgbench', 'available', now(), '{}');
COMMIT;
