-- +goose Up
-- Time ranges over the two append-only logs: the overview's last hour of
-- dispatch outcomes reads fulfilment_transition by created_at, the event
-- listing's since/until reads webhook_event by first_seen_at. Both columns
-- grow with the row order, which is what a BRIN index needs: a few pages
-- for the whole table, and next to nothing per insert. autosummarize keeps
-- new ranges summarized as they fill.
CREATE INDEX fulfilment_transition_created_brin ON fulfilment_transition USING brin (created_at) WITH (autosummarize = on);
CREATE INDEX webhook_event_first_seen_brin ON webhook_event USING brin (first_seen_at) WITH (autosummarize = on);

-- +goose Down
DROP INDEX webhook_event_first_seen_brin;
DROP INDEX fulfilment_transition_created_brin;
