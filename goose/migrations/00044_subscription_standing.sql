-- +goose Up
-- A subscription past due or paused is suspended (docs/design.md,
-- "Subscriptions"): what its start granted is taken back where the
-- action's policy says (subscription_suspended), and granted again, once,
-- when it is active again. An event that suspends a subscription names it
-- (suspends) and, once resolved, reverses the grant in force as a refund
-- does; one that says it is active names it (resumes) and, where it ends
-- a suspension that took something back, pays for the grant again: a
-- purchase of its own, named after the start's (payment_id '<start>~<n>'),
-- whose root is the start's purchase.
ALTER TABLE webhook_event
    ADD COLUMN suspends text COLLATE "C" CHECK (suspends <> ''),
    ADD COLUMN resumes text COLLATE "C" CHECK (resumes <> '');
CREATE INDEX webhook_event_suspends ON webhook_event (provider, suspends) WHERE suspends IS NOT NULL;
CREATE INDEX webhook_event_resumes ON webhook_event (provider, resumes) WHERE resumes IS NOT NULL;

-- A subscription's standing as its provider's events have said it, by the
-- latest of their signed times: the suspension in force (an event's id).
-- How many times a resumption granted again is not kept: it is the number
-- of purchases whose root is the start's (purchase_root). Written under the
-- subscription's advisory lock (db.LinkSubscriptions), whichever of its
-- events arrives first.
CREATE TABLE subscription_standing (
    provider        text NOT NULL,
    subscription_id text COLLATE "C" NOT NULL CHECK (subscription_id <> ''),
    suspended_by    bigint,
    standing_at     timestamptz,
    PRIMARY KEY (provider, subscription_id)
);

-- A grant again after a suspension is a purchase whose root is the
-- start's.
ALTER TABLE purchase ADD COLUMN root text COLLATE "C" CHECK (root <> payment_id);
CREATE INDEX purchase_root ON purchase (provider, root) WHERE root IS NOT NULL;

-- What takes each payment back: the events that reverse it, and, for a
-- grant again, those that reverse its root (an end, a refund, a dispute
-- of the start) but not its root's suspensions, which came before it.
-- Every reader of reversals reads them here.
CREATE VIEW payment_reversal AS
    SELECT e.provider, e.reverses AS payment_id, e.id, e.event_id, e.revokes
    FROM webhook_event e WHERE e.reverses IS NOT NULL
    UNION ALL
    SELECT g.provider, g.payment_id, e.id, e.event_id, e.revokes
    FROM purchase g JOIN webhook_event e ON e.provider = g.provider AND e.reverses = g.root
    WHERE g.root IS NOT NULL AND e.suspends IS NULL;

-- +goose Down
DROP VIEW payment_reversal;
DROP INDEX purchase_root;
ALTER TABLE purchase DROP COLUMN root;
DROP TABLE subscription_standing;
UPDATE webhook_event SET reverses = NULL, revokes = NULL, reversal = NULL WHERE suspends IS NOT NULL;
DROP INDEX webhook_event_suspends;
DROP INDEX webhook_event_resumes;
ALTER TABLE webhook_event DROP COLUMN suspends, DROP COLUMN resumes;
