-- +goose Up
-- Actions (docs/design.md, "Actions: what a purchase pays for"): a purchase
-- pays for several things, each its own exactly-once record. A fulfilment
-- row names the action it performs (action_name); rows made before actions
-- existed perform the one action of a deployment without an actions file,
-- 'fulfil'. (The older column action says which way a row goes: fulfil or
-- revoke.)
--
-- A name is hashed into keys beside ':' separators, so it has none.
ALTER TABLE fulfilment ADD COLUMN action_name text NOT NULL DEFAULT 'fulfil'
    CONSTRAINT fulfilment_action_name_check CHECK (action_name ~ '^[a-z][a-z0-9_]{0,39}$');

-- Invariant 1, per action: one live fulfilment and one live revocation per
-- (payment, action).
CREATE UNIQUE INDEX fulfilment_one_per_action ON fulfilment (provider, payment_id, action_name, action)
    WHERE state <> 'failed';
DROP INDEX fulfilment_one_per_payment;

-- The action a row performs is part of its identity, like its key: the
-- guard's list of identity columns is not copied for it (00038), a trigger
-- of its own refuses the change, and fires only when the column is set.
-- +goose StatementBegin
CREATE FUNCTION guardian_action_name_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fulfilment %: identity columns are immutable', OLD.id USING ERRCODE = 'check_violation';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER fulfilment_action_name_guard BEFORE UPDATE OF action_name ON fulfilment
    FOR EACH ROW WHEN (NEW.action_name IS DISTINCT FROM OLD.action_name)
    EXECUTE FUNCTION guardian_action_name_guard();

-- Each action's key derives from provider, payment, action and that
-- action's declined count. The action 'fulfil' keeps the derivation it
-- always had (guardian_idempotency_key, guardian_revoke_key): a
-- deployment that upgrades sends no payment under a new key. Any other
-- action hashes its name into a namespace of its own, so no two actions
-- of a payment, nor a fulfilment and a revocation, share a key.
-- +goose StatementBegin
CREATE FUNCTION guardian_action_key(provider text, payment_id text, action_name text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN action_name = 'fulfil' THEN guardian_idempotency_key(provider, payment_id, declined)
        ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action:' || action_name || ':' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
    END
$$;
CREATE FUNCTION guardian_action_revoke_key(provider text, payment_id text, action_name text, declined bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN action_name = 'fulfil' THEN guardian_revoke_key(provider, payment_id, declined)
        ELSE 'gk1_' || left(encode(sha256(convert_to('guardian/v1/action-revoke:' || action_name || ':' || provider || ':' || declined || ':' || payment_id, 'UTF8')), 'hex'), 40)
    END
$$;
-- +goose StatementEnd

-- A purchase's actions are decided once, when it is first recorded as
-- paid, by the routes in force then (routes names them by digest), and
-- recorded here in the same transaction as its rows: a later event of the
-- purchase, a redelivery, a backfill or a node whose routes differ adds
-- nothing to them. Only an operator's apply adds an action afterwards.
-- detail is the purchase in the one shape every receiver is sent.
CREATE TABLE purchase (
    provider   text NOT NULL,
    payment_id text NOT NULL,
    actions    text[] NOT NULL,
    routes     text NOT NULL,
    detail     jsonb,
    routed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, payment_id)
);

-- A purchase's routes are not decided again, but an operator may apply a
-- new action to past purchases (guardian actions apply): each such
-- addition is recorded here, by whom and when, once per (purchase,
-- action).
CREATE TABLE action_applied (
    provider    text NOT NULL,
    payment_id  text NOT NULL,
    action_name text NOT NULL,
    operator    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, payment_id, action_name),
    FOREIGN KEY (provider, payment_id) REFERENCES purchase (provider, payment_id)
);
-- Apply reads purchases by when they were routed.
CREATE INDEX purchase_routed_at ON purchase (routed_at, provider, payment_id);

-- What a reversal takes back, per action: the actions whose take-back
-- policy, at the node that recorded the reversal, takes the payment back
-- for it. reverses stays the payment it takes back for at least one.
-- Reversals recorded before actions existed took back the one action.
ALTER TABLE webhook_event ADD COLUMN revokes text[];
UPDATE webhook_event SET revokes = '{fulfil}' WHERE reverses IS NOT NULL;

-- +goose Down
UPDATE webhook_event SET reverses = NULL, reversal = NULL WHERE reverses IS NOT NULL AND NOT 'fulfil' = ANY(revokes);
ALTER TABLE webhook_event DROP COLUMN revokes;
DROP TABLE action_applied;
DROP TABLE purchase;
DROP FUNCTION guardian_action_revoke_key(text, text, text, bigint);
DROP FUNCTION guardian_action_key(text, text, text, bigint);
DROP TRIGGER fulfilment_action_name_guard ON fulfilment;
DROP FUNCTION guardian_action_name_guard();
-- Rows of other actions cannot be kept under one-per-payment.
DELETE FROM fulfilment_transition WHERE fulfilment_id IN (SELECT id FROM fulfilment WHERE action_name <> 'fulfil');
DELETE FROM fulfilment WHERE action_name <> 'fulfil';
CREATE UNIQUE INDEX fulfilment_one_per_payment ON fulfilment (provider, payment_id, action)
    WHERE state <> 'failed';
DROP INDEX fulfilment_one_per_action;
ALTER TABLE fulfilment DROP COLUMN action_name;
