-- The claim must read push_deliveries_claimable in its own order and stop at its limit, whatever
-- the statistics say. They are stale during every big campaign (an audience of a million rows is
-- inserted in seconds; autovacuum analyzes a minute later at best), and with them the planner
-- preferred this smaller partial index: all of a job's pending rows, then a sort spilling to disk,
-- on every claim (150-250 ms for 100,000 pending rows, measured). push_deliveries_by_job
-- (job_id, status) answers "is anything of this job pending?" just as well.
DROP INDEX push_deliveries_pending_by_job;

-- Fresher statistics and fewer dead index entries in front of the claim's scan during long
-- campaigns: the defaults wait until 10-20 % of the table changed.
ALTER TABLE push_deliveries SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
