-- +goose Up
-- guardian_require fails the statement that calls it, and so its
-- transaction, with SQLSTATE GX001 when ok is false. An intake batch of
-- plain events is sent whole in one round trip, COMMIT included
-- (db.RecordPlainBatch); where the rows find what only the batch's longer
-- path decides (refunds stored before their payment's paid event), the
-- batch must not commit, and this is how its statement says so. The
-- caller sees the code and writes the batch again the longer way.
-- +goose StatementBegin
CREATE FUNCTION guardian_require(ok boolean, why text) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'guardian: %', why USING ERRCODE = 'GX001';
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION guardian_require(boolean, text);
