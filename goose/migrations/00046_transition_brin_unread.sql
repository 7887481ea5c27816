-- +goose Up
-- fulfilment_transition_created_brin was made for the overview's last
-- hour of dispatch outcomes (migration 00018), which has read the folded
-- minutes and the changes not yet folded since migration 00029: no
-- statement reads the transitions by time any more, and every transition
-- a payment writes (three) still paid for the index (issue 36: keep only
-- the indexes a query needs; db.TestLookupsUseIndexes names each one's
-- reader).
DROP INDEX fulfilment_transition_created_brin;

-- +goose Down
CREATE INDEX fulfilment_transition_created_brin ON fulfilment_transition USING brin (created_at) WITH (autosummarize = on);
