-- +goose Up
-- Every payment id in one collation, as 00026 made it: the purchase table
-- (00039) kept the database's, so intake's look-up of a payment's purchase
-- compared a "C" id with a column whose index is in another collation, and
-- read every purchase of the provider per new payment. In "C" it is one
-- step down purchase_pkey. Equality is the same under a deterministic
-- collation; the indexes are rebuilt, the rows kept.
ALTER TABLE action_applied DROP CONSTRAINT action_applied_provider_payment_id_fkey;
ALTER TABLE purchase ALTER COLUMN payment_id TYPE text COLLATE "C";
ALTER TABLE action_applied ALTER COLUMN payment_id TYPE text COLLATE "C";
ALTER TABLE action_applied ADD CONSTRAINT action_applied_provider_payment_id_fkey
    FOREIGN KEY (provider, payment_id) REFERENCES purchase (provider, payment_id);

-- +goose Down
ALTER TABLE action_applied DROP CONSTRAINT action_applied_provider_payment_id_fkey;
ALTER TABLE action_applied ALTER COLUMN payment_id TYPE text COLLATE "default";
ALTER TABLE purchase ALTER COLUMN payment_id TYPE text COLLATE "default";
ALTER TABLE action_applied ADD CONSTRAINT action_applied_provider_payment_id_fkey
    FOREIGN KEY (provider, payment_id) REFERENCES purchase (provider, payment_id);
