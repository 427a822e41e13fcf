-- The audit by app and by time without walking the whole log (issue 28's target, p99 < 50 ms at
-- 100 million rows):
--
-- - A delivery carries its job's app, as it carries its job's creation time: the app filter had
--   to join each row to its device to learn the app, walking every app's rows back from the
--   cursor (a page of a small app behind a large app's campaign read 128,000 rows, 1 s at 10
--   million). Indexed by (app_id, id), a page reads its own rows.
-- - Deliveries are indexed by when they last changed (updated_at, the audit's `since`): since
--   cannot prune the days (an old job's retry changes a row today), and without it a page of
--   recent failures read every day's failures before it knew it had all (1.1 s p99 at 10 million).
--
-- The existing rows get their job's app here, in one UPDATE under the migration's lock: every
-- row is written again, so the log takes twice its room until autovacuum has been through
-- (docs/operating.md gives the time per million rows).
ALTER TABLE push_deliveries ADD COLUMN app_id bigint;
UPDATE push_deliveries d SET app_id = j.app_id FROM push_jobs j WHERE j.id = d.job_id;
ALTER TABLE push_deliveries ALTER COLUMN app_id SET NOT NULL;
-- An app's audit, newest first.
CREATE INDEX push_deliveries_by_app ON push_deliveries (app_id, id);
-- The audit of what changed since a time.
CREATE INDEX push_deliveries_by_update ON push_deliveries (updated_at);

-- The first UTC day whose deliveries changed at or after `since`, NULL when none did: the audit
-- binds it as a bound of job_created_at, so the planner leaves out the days before it. A day's
-- partition is asked alone (one small plan each, the first row of its index by updated_at),
-- oldest first, up to the first that has such a row. A row in the default partition (a day
-- without its partition) answers for its own day.
CREATE FUNCTION push_first_day_changed_since(since timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_partition record;
    v_changed boolean;
    v_first timestamptz;
BEGIN
    SELECT date_trunc('day', min(d.job_created_at) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' INTO v_first
      FROM push_deliveries_default d WHERE d.updated_at >= since;
    FOR v_partition IN
        SELECT c.relname, to_date(substr(c.relname, length('push_deliveries_') + 1), 'YYYYMMDD') AS day
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'push_deliveries'::regclass AND c.relname ~ '^push_deliveries_[0-9]{8}$'
         ORDER BY 2
    LOOP
        EXIT WHEN v_first IS NOT NULL AND v_partition.day::timestamp AT TIME ZONE 'UTC' >= v_first;
        EXECUTE format('SELECT EXISTS (SELECT FROM %I WHERE updated_at >= $1)', v_partition.relname) INTO v_changed USING since;
        IF v_changed THEN
            RETURN v_partition.day::timestamp AT TIME ZONE 'UTC';
        END IF;
    END LOOP;
    RETURN v_first;
END
$$;

-- Rows now carry their job's app: the current definition, with it.
CREATE OR REPLACE FUNCTION push_expire_jobs() RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_job push_jobs%ROWTYPE;
    v_message text;
BEGIN
    FOR v_job IN
        SELECT * FROM push_jobs
         WHERE status IN ('queued', 'running') AND expires_at IS NOT NULL AND expires_at <= now()
         ORDER BY expires_at
           FOR UPDATE SKIP LOCKED
    LOOP
        v_message := 'expired at ' || to_char(v_job.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || ' before it was sent';
        IF NOT v_job.audience_complete THEN
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
            SELECT v_job.id, d.id, 'skipped', 'EXPIRED', v_message, v_job.created_at, v_job.app_id
              FROM push_devices d
             WHERE d.app_id = v_job.app_id AND d.is_active AND d.id > v_job.audience_cursor
               AND (v_job.user_ids IS NULL OR d.user_id = ANY(v_job.user_ids))
               AND (v_job.platforms IS NULL OR d.platform = ANY(v_job.platforms))
            ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        END IF;
        UPDATE push_jobs
           SET status = 'running', started_at = COALESCE(started_at, now()), audience_complete = true
         WHERE id = v_job.id;
        UPDATE push_deliveries SET status = 'skipped', error_code = 'EXPIRED', error_message = v_message,
                                   lease_owner = NULL, updated_at = now()
         WHERE job_id = v_job.id AND job_created_at = v_job.created_at
           AND status = 'pending' AND (lease_owner IS NULL OR next_attempt_at <= now());
        WITH gone AS (
            DELETE FROM push_job_chunks WHERE job_id = v_job.id AND lease_until <= now() RETURNING device_ids)
        INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
        SELECT v_job.id, dev.id, 'skipped', 'EXPIRED', v_message, v_job.created_at, v_job.app_id
          FROM gone CROSS JOIN LATERAL unnest(device_ids) AS dev(id)
        ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING;
        UPDATE push_jobs j SET status = 'completed', finished_at = now()
         WHERE j.id = v_job.id
           AND NOT EXISTS (SELECT 1 FROM push_deliveries d
                            WHERE d.job_id = j.id AND d.job_created_at = v_job.created_at AND d.status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM push_job_chunks c WHERE c.job_id = j.id);
        IF FOUND THEN
            RETURN NEXT v_job.id;
        END IF;
    END LOOP;
END
$$;
