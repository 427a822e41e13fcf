-- Jobs cancelled or failed while a worker held some of their deliveries under a lease that had
-- not run out. That worker records them when their sends return; if it stopped instead, nothing
-- did (claims take only running jobs' rows), and they stayed `pending` for good. push-worker
-- settles such a job's rows once their lease runs out, the way the ending settled the others
-- (JobDirectory.settleHeldAtEndings), and forgets the job when none is held any more.
CREATE TABLE push_jobs_held_at_ending (
    job_id bigint PRIMARY KEY REFERENCES push_jobs (id) ON DELETE CASCADE
);

-- What earlier endings left.
INSERT INTO push_jobs_held_at_ending (job_id)
SELECT DISTINCT d.job_id
  FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id AND j.created_at = d.job_created_at
 WHERE d.status = 'pending' AND j.status IN ('cancelled', 'failed');
