-- +goose Up
-- The sweep's look-up of a fulfilment's live dispatch jobs needs only jobs
-- that are not finalized: index those alone. A job's completion (and its
-- cancellation or discard) then writes no entry here, and the index holds
-- the jobs in flight rather than every job River keeps.
DROP INDEX river_job_guardian_dispatch_fulfilment;
CREATE INDEX river_job_guardian_dispatch_fulfilment ON river_job ((args ->> 'fulfilment_id'))
    WHERE kind = 'guardian_dispatch' AND state IN ('available', 'scheduled', 'retryable', 'pending', 'running');

-- +goose Down
DROP INDEX river_job_guardian_dispatch_fulfilment;
CREATE INDEX river_job_guardian_dispatch_fulfilment ON river_job ((args ->> 'fulfilment_id'))
    WHERE kind = 'guardian_dispatch';
