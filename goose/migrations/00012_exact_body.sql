-- +goose Up
-- The exact bytes a provider signed, kept as they arrived and handed on as
-- they are: what was verified is what is kept. jsonb normalised them, and
-- refused some that verify (a \u0000 escape), answering 503 forever.
ALTER TABLE webhook_event ADD COLUMN body bytea;
UPDATE webhook_event SET body = convert_to(payload::text, 'UTF8');
ALTER TABLE webhook_event ALTER COLUMN body SET NOT NULL;
ALTER TABLE webhook_event DROP COLUMN payload;

-- +goose Down
-- Bodies jsonb cannot hold (a \u0000 escape) make this fail: keep them.
ALTER TABLE webhook_event ADD COLUMN payload jsonb;
UPDATE webhook_event SET payload = convert_from(body, 'UTF8')::jsonb;
ALTER TABLE webhook_event ALTER COLUMN payload SET NOT NULL;
ALTER TABLE webhook_event DROP COLUMN body;
