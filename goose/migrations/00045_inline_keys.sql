-- +goose Up
-- The key functions, declared so Postgres inlines them into the statements
-- that call them (issue 36). As declared before, none could be: they were
-- IMMUTABLE, and an IMMUTABLE function whose body calls a STABLE one
-- (convert_to, and anytextcat, which joined the bigint `declined` to text)
-- is never inlined; guardian_action_key's CASE is not strict, and a STRICT
-- function whose body is not strict is never inlined either. So every
-- fulfilment made ran two SQL functions through the function executor, a
-- statement each: pg_stat_statements counted them beside the intake
-- statements that called them. They are STABLE now, which is what their
-- bodies are (no index or constraint uses them), the action keys are
-- called on NULL input, and declined is cast to text itself. The keys are
-- the same text (declined::text is what anytextcat made of it), and NULL
-- for any NULL argument as before, through the concatenations.
-- TestKeysAreInlined holds them to both.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_idempotency_key(provider text, payment_id text, declined bigint) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1:' || provider || ':' || declined::text || ':' || payment_id, 'UTF8')), 'hex'), 40)
$$;
CREATE OR REPLACE FUNCTION guardian_revoke_key(provider text, payment_id text, declined bigint) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1/revoke:' || provider || ':' || declined::text || ':' || payment_id, 'UTF8')), 'hex'), 40)
$$;
CREATE OR REPLACE FUNCTION guardian_action_key(provider text, payment_id text, action_name text, declined bigint) RETURNS text
    LANGUAGE sql STABLE CALLED ON NULL INPUT PARALLEL SAFE AS $$
    SELECT CASE WHEN action_name = 'fulfil' THEN guardian_idempotency_key(provider, payment_id, declined)
        ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action:' || action_name || ':' || provider || ':' || declined::text || ':' || payment_id, 'UTF8')), 'hex'), 40)
    END
$$;
CREATE OR REPLACE FUNCTION guardian_action_revoke_key(provider text, payment_id text, action_name text, declined bigint) RETURNS text
    LANGUAGE sql STABLE CALLED ON NULL INPUT PARALLEL SAFE AS $$
    SELECT CASE WHEN action_name = 'fulfil' THEN guardian_revoke_key(provider, payment_id, declined)
        ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action-revoke:' || action_name || ':' || provider || ':' || declined::text || ':' || payment_id, 'UTF8')), 'hex'), 40)
    END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION guardian_idempotency_key(provider text, payment_id text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1:' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
$$;
CREATE OR REPLACE FUNCTION guardian_revoke_key(provider text, payment_id text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'gk1_' || left(encode(sha256(convert_to('guardian/v1/revoke:' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
$$;
CREATE OR REPLACE FUNCTION guardian_action_key(provider text, payment_id text, action_name text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN action_name = 'fulfil' THEN guardian_idempotency_key(provider, payment_id, declined)
        ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action:' || action_name || ':' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
    END
$$;
CREATE OR REPLACE FUNCTION guardian_action_revoke_key(provider text, payment_id text, action_name text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN action_name = 'fulfil' THEN guardian_revoke_key(provider, payment_id, declined)
        ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action-revoke:' || action_name || ':' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
    END
$$;
-- +goose StatementEnd
