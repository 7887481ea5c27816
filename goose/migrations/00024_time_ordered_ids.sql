-- +goose Up
-- Write locality (docs/design.md, "Bounded growth"). A fulfilment's id was
-- a random UUID (v4): every insert landed on a random leaf of the primary
-- key's index and of every index that carries the id, so at hundreds of
-- millions of rows each insert touched a page that had left the cache,
-- and the index grew by half-empty splits. A UUIDv7 starts with the
-- millisecond it was made: inserts append at the index's right edge, the
-- hot pages stay cached, and pages fill before they split. The rest of it
-- is random, so ids stay unguessable within a millisecond. Rows made
-- before keep their ids. (Events, transitions and checks already take
-- ids from a sequence.)
-- +goose StatementBegin
CREATE FUNCTION guardian_uuid7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    -- 48 bits of Unix milliseconds, then a random v4 UUID's remaining 80
    -- bits with its version nibble turned from 4 (0100) to 7 (0111).
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;
-- +goose StatementEnd
ALTER TABLE fulfilment ALTER COLUMN id SET DEFAULT guardian_uuid7();

-- +goose Down
ALTER TABLE fulfilment ALTER COLUMN id SET DEFAULT gen_random_uuid();
DROP FUNCTION guardian_uuid7();
