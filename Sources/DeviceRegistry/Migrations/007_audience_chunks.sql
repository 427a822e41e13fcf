-- A delivery row is now written once, with its result. A worker that takes the next devices of a
-- job's audience records them as chunks leased to itself (at most 64 devices each), sends them,
-- and inserts each device's delivery row with its outcome (sent, failed, skipped, or pending for a
-- retry) in the statement that deletes the finished chunk. Before, the row was inserted pending
-- and leased, then updated with its result: an update that is never HOT (the status is indexed)
-- and costs a new row version and four index entries per delivery.
--
-- A crashed worker's chunks are taken over when their lease runs out: the devices without a row
-- yet are sent by the next worker, as leased rows were.
CREATE TABLE push_job_chunks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       bigint NOT NULL REFERENCES push_jobs (id),
    device_ids   bigint[] NOT NULL CHECK (cardinality(device_ids) BETWEEN 1 AND 64),
    lease_owner  text NOT NULL,
    -- The worker's heartbeat moves it on while the sends are in flight.
    lease_until  timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_job_chunks_by_lease ON push_job_chunks (lease_until, id);
CREATE INDEX push_job_chunks_by_job ON push_job_chunks (job_id);
-- Every row is inserted and deleted within seconds: vacuum it often.
ALTER TABLE push_job_chunks SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

-- The devices of a job's chunks that have no delivery row yet: in flight, so pending.
CREATE FUNCTION push_job_in_flight(p_job_id bigint)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM push_job_chunks c CROSS JOIN LATERAL unnest(c.device_ids) AS dev(id)
     WHERE c.job_id = p_job_id
       AND NOT EXISTS (SELECT FROM push_deliveries d WHERE d.job_id = p_job_id AND d.device_id = dev.id)
$$;
