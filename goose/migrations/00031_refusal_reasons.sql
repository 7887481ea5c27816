-- +goose Up
-- The refusal reasons are one list (db.RefusalReasons), which this
-- constraint, the OpenAPI description and the code share, and a test reads
-- back from the catalogue (issue 31). 00015 listed seven; "mode" (a
-- well-signed event of the other mode) was refused but could not be
-- recorded, and took every other refusal of its batch down with it.
-- "foreign" is a well-signed delivery for an account the deployment does
-- not serve (another shop of a public Shopify app); "rebound" a second body
-- under one signed PayPal transmission id.
ALTER TABLE refused_delivery DROP CONSTRAINT refused_delivery_reason_check;
ALTER TABLE refused_delivery ADD CONSTRAINT refused_delivery_reason_check CHECK (reason IN (
    'signature', 'timestamp', 'malformed', 'mode', 'foreign', 'rebound', 'too_large', 'unreadable', 'unknown_provider', 'invalid'));

-- +goose Down
DELETE FROM refused_delivery WHERE reason IN ('mode', 'foreign', 'rebound');
ALTER TABLE refused_delivery DROP CONSTRAINT refused_delivery_reason_check;
ALTER TABLE refused_delivery ADD CONSTRAINT refused_delivery_reason_check CHECK (reason IN (
    'signature', 'timestamp', 'malformed', 'too_large', 'unreadable', 'unknown_provider', 'invalid'));
