-- +goose Up
-- Where the sweep's revocation catch-all stands (issue 23): the
-- transaction time of its last committed round and of its last full round
-- (every reversed payment read). It lived in the leader's memory, so every
-- new leader (each deploy, each failover) began with a full round, which
-- reads every reversal ever stored: 6 s at 10 million payments in `just
-- bench-scale`, on the leader's first round after each start. Kept here,
-- written by the round that moved it in its own transaction (under the
-- sweep lock's fence), a new leader goes on from where the last one
-- stopped, and a full round comes once an hour whoever leads. A restored
-- database restores it with the rows it describes.
CREATE TABLE take_back_window (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    last      timestamptz NOT NULL,
    last_full timestamptz NOT NULL
);

-- +goose Down
DROP TABLE take_back_window;
